"""Every `sglang-eagle3` command, once: its name, its `python -m` entry, its summary.

A new command is a `cli/<name>.py` with a `main(argv)` (the fixed role the dispatcher imports when the command
runs) and one row here; `--help`, the dispatcher, the usage lines (`naming.prog`) and the tests all read this table.
`register` refuses a row whose module or entry is missing, whose name is taken or whose summary is no one line, in
one line naming the command.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

_PKG = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"[a-z][a-z0-9-]*")


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    module: str  # its `python -m sglang_eagle3_ext.MODULE` entry
    summary: str  # one line in `sglang-eagle3 --help`

    @property
    def main(self) -> str:
        """The "module:function" under sglang_eagle3_ext it runs: cli/<name>.py's main, imported when it runs."""
        return f"cli.{self.name}:main"


class CommandRefused(TypeError):
    """A row that does not conform: raised by `register`, one line naming the command and what it lacks."""


def _is_module(dotted: str) -> bool:
    path = _PKG.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def problems(command: Command, taken=()) -> list[str]:
    """What keeps `command` from being a row (checked by path: nothing is imported); [] when it conforms."""
    out = []
    if not isinstance(command.name, str) or not _NAME.fullmatch(command.name):
        return [f"name {command.name!r} is no lower-case command word"]
    if command.name in taken:
        out.append("the name is taken")
    if not (_PKG / "cli" / f"{command.name}.py").is_file():
        out.append(f"no cli/{command.name}.py (its main)")
    if not isinstance(command.module, str) or not _is_module(command.module):
        out.append(f"`python -m` entry {command.module!r} is no module or package with a __main__")
    if not isinstance(command.summary, str) or not command.summary.strip() or "\n" in command.summary:
        out.append("the summary is not one line")
    return out


def register(*commands: Command) -> tuple[Command, ...]:
    """The rows, once each conforms (CommandRefused otherwise)."""
    for i, c in enumerate(commands):
        bad = problems(c, {d.name for d in commands[:i]})
        if bad:
            raise CommandRefused(f"command {getattr(c, 'name', c)!r} does not conform: {'; '.join(bad)}")
    return commands


COMMANDS = register(
    Command(
        "launch",
        "launch_server",
        "start SGLang with the patches, a preset and NCCL settings from the topology (--dry-run: plan only)",
    ),
    Command("dump", "dump", "run | export | status: drive a dumping server, export the dump for speculators/SpecForge"),
    Command("convert", "convert", "convert a speculators / SpecForge / EAGLE draft into the installed SGLang's layout"),
    Command("check", "check", "check a draft offline against the installed SGLang and the target: will this serve?"),
    Command(
        "bench", "bench", "acceptance benchmark: accept length per draft position, tokens/s and speedup per concurrency"
    ),
    Command(
        "train",
        "train_draft",
        "train an EAGLE-3 draft on exported hidden states (Llama drafts through speculators, MLA drafts our own loop)",
    ),
    Command("compat", "compat", "check that a SGLang release still has every function the patches target"),
    Command("tiny", "tiny", "write the built-in tiny DeepSeek-V3 target (the presets' builtin:tiny model)"),
    Command(
        "patches", "cli.patches", "list or print the static patch (patches/RELEASE/*.patch) for baked SGLang images"
    ),
    Command(
        "eval",
        "cli.eval",
        "predict a draft's served accept length offline on held-out samples (--url: beside the served one)",
    ),
    Command(
        "swap",
        "cli.swap",
        "load a new draft into a running EAGLE-3 server without a restart (checked first; refused: old draft kept)",
    ),
    Command(
        "refresh",
        "cli.refresh",
        "train the served draft further on the traffic it served; keep it only if predicted better (--swap)",
    ),
    Command(
        "build",
        "cli.build",
        "prompts in, a checked and predicted draft out: dump, export, train, convert, check, eval, report (resumable)",
    ),
    Command(
        "tune",
        "cli.tune",
        "the fastest speculative settings for your draft and traffic: offline accept side, timed costs, a preset",
    ),
)

BY_NAME = {c.name: c for c in COMMANDS}
