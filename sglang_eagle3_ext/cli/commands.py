"""Every `sglang-eagle3` command, once: its name, the function that runs it, its `python -m` entry, its summary.

A new command is a `cli/<name>.py` with a `main(argv)` and one row here; `--help`, the dispatcher, the usage
lines (`naming.prog`) and the tests all read this table.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    name: str
    main: str  # "module:function" under sglang_eagle3_ext, imported only when the command runs
    module: str  # its `python -m sglang_eagle3_ext.MODULE` entry
    summary: str  # one line in `sglang-eagle3 --help`


COMMANDS = (
    Command(
        "launch",
        "cli.launch:main",
        "launch_server",
        "start SGLang with the patches, a preset and NCCL settings from the topology (--dry-run: plan only)",
    ),
    Command(
        "dump",
        "cli.dump:main",
        "dump",
        "run | export | status: drive a dumping server, export the dump for speculators/SpecForge",
    ),
    Command(
        "convert",
        "cli.convert:main",
        "convert",
        "convert a speculators / SpecForge / EAGLE draft into the installed SGLang's layout",
    ),
    Command(
        "check",
        "cli.check:main",
        "check",
        "check a draft offline against the installed SGLang and the target: will this serve?",
    ),
    Command(
        "bench",
        "cli.bench:main",
        "bench",
        "acceptance benchmark: accept length per draft position, tokens/s and speedup per concurrency",
    ),
    Command(
        "train",
        "cli.train:main",
        "train_draft",
        "train an EAGLE-3 draft on exported hidden states (Llama drafts through speculators, MLA drafts our own loop)",
    ),
    Command(
        "compat", "cli.compat:main", "compat", "check that a SGLang release still has every function the patches target"
    ),
    Command(
        "tiny", "cli.tiny:main", "tiny", "write the built-in tiny DeepSeek-V3 target (the presets' builtin:tiny model)"
    ),
    Command(
        "patches",
        "cli.patches:main",
        "cli.patches",
        "list or print the static patch (patches/RELEASE/*.patch) for baked SGLang images",
    ),
    Command(
        "eval",
        "cli.eval:main",
        "cli.eval",
        "predict a draft's served accept length offline on held-out samples (--url: beside the served one)",
    ),
    Command(
        "swap",
        "cli.swap:main",
        "cli.swap",
        "load a new draft into a running EAGLE-3 server without a restart (checked first; refused: old draft kept)",
    ),
    Command(
        "refresh",
        "cli.refresh:main",
        "cli.refresh",
        "train the served draft further on the traffic it served; keep it only if predicted better (--swap)",
    ),
    Command(
        "build",
        "cli.build:main",
        "cli.build",
        "prompts in, a checked and predicted draft out: dump, export, train, convert, check, eval, report (resumable)",
    ),
    Command(
        "tune",
        "cli.tune:main",
        "cli.tune",
        "the fastest speculative settings for your draft and traffic: offline accept side, timed costs, a preset",
    ),
)

BY_NAME = {c.name: c for c in COMMANDS}
