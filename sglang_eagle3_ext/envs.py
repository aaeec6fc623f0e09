"""Every environment variable this package reads, in one table: name, type, default, preset key, meaning.

    from sglang_eagle3_ext import envs
    envs.get(envs.DUMP_DIR)            # parsed value (default when unset); EnvError on a bad value
    envs.raw(envs.ENABLE)              # the text as set, None when unset

One rule per type, the same in every module: booleans accept `1/true/yes/on` and `0/false/no/off/""`
(case and surrounding spaces ignored), integers only ASCII digits, choices one of the listed words;
anything else is an `EnvError` naming the variable and its legal values. For every type but bool an
empty value means "unset" (the default). The README's variable tables are generated from this table
(`python -m sglang_eagle3_ext.envs --markdown`; a test keeps them equal). Imports nothing heavy.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from .env_rules import FALSE, LAYERS_LEGAL, TRUE, DraftLayers, EnvError, Var, parse_bool, parse_layers  # noqa: F401 - re-exported


def _cache_default() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglang_eagle3_ext")


# Names (import these rather than spelling the strings).
ENABLE = "SGLANG_EAGLE3_EXT"
FORCE_VERSION = "SGLANG_EAGLE3_EXT_FORCE_VERSION"
CACHE = "SGLANG_EAGLE3_EXT_CACHE"
DEFER_WIDTH_CHECK = "SGLANG_EAGLE3_EXT_DEFER_WIDTH_CHECK"
VALUE_SCAN = "SGLANG_EAGLE3_EXT_VALUE_SCAN"
DEBUG = "SGLANG_EAGLE3_EXT_DEBUG"
DUMP_DIR = "SGLANG_EAGLE3_EXT_DUMP_DIR"
DUMP_LAYERS = "SGLANG_EAGLE3_EXT_DUMP_LAYERS"
DUMP_FINAL = "SGLANG_EAGLE3_EXT_DUMP_FINAL"
DUMP_MAX_PENDING_MB = "SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB"
DUMP_IO_THREADS = "SGLANG_EAGLE3_EXT_DUMP_IO_THREADS"
DUMP_MIN_TOKENS = "SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS"
DUMP_COPY_STREAM = "SGLANG_EAGLE3_EXT_DUMP_COPY_STREAM"
DUMP_ENCODING = "SGLANG_EAGLE3_EXT_DUMP_ENCODING"
DUMP_WRITER = "SGLANG_EAGLE3_EXT_DUMP_WRITER"
DUMP_DISCARD = "SGLANG_EAGLE3_EXT_DUMP_DISCARD"
DUMP_RESPONSES = "SGLANG_EAGLE3_EXT_DUMP_RESPONSES"
DUMP_SAMPLE_RATE = "SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE"
DUMP_MAX_ACCEPT_LEN = "SGLANG_EAGLE3_EXT_DUMP_MAX_ACCEPT_LEN"
TRAIN_RECORD_SAMPLES = "SGLANG_EAGLE3_EXT_TRAIN_RECORD_SAMPLES"
TRAIN_STOP_AFTER_EPOCHS = "SGLANG_EAGLE3_EXT_TRAIN_STOP_AFTER_EPOCHS"

_VARS: tuple[Var, ...] = (
    Var(
        ENABLE,
        "bool",
        False,
        "patch every SGLang process (draft loader, fc width guard, explicit capture layers) through the installed "
        "`.pth` and SGLang's plugin entry point. On an image with `patches/` baked in, unset means on and a false "
        "value turns the baked patches off. A value outside the legal ones: one log line, package off",
    ),
    Var(FORCE_VERSION, "bool", False, "run on a SGLang release outside the supported range"),
    Var(
        CACHE,
        "path",
        _cache_default,
        "cache of the built-in tiny target and of downloaded SGLang wheels (`compat`)",
        default_doc="`$XDG_CACHE_HOME/sglang_eagle3_ext`",
    ),
    Var(
        DEFER_WIDTH_CHECK,
        "bool",
        False,
        "leave a draft's fc-width problem to the forward guard instead of refusing the load",
    ),
    Var(VALUE_SCAN, "bool", True, "scan every draft weight for NaN/Inf at load (one read pass per weight)"),
    Var(DEBUG, "bool", False, "command-line tools print the full traceback of an error (as `--debug`)"),
    Var(
        DUMP_DIR,
        "path",
        None,
        "dump directory; turns dumping on. Must exist for a plain SGLang launch (a typo must not start a new "
        "tree); `sglang-eagle3 launch --dump-dir DIR` creates it",
        section="dump",
        preset_key="dump_dir",
    ),
    Var(
        DUMP_LAYERS,
        "layers",
        None,
        "HF hidden_states indices (0 = embeddings, i = output of decoder layer i-1); or `LAYOUT:N`, the layers a "
        "fresh draft of that layout with N layers reads (`dflash:5`: SGLang's DFlash rule, refused on a release "
        "without DFlash)",
        section="dump",
        preset_key="dump_layers",
        default_doc="`2,n//2,n-3` (n < 7: `1,n//2,n-1`)",
    ),
    Var(
        DUMP_FINAL,
        "choice",
        "prenorm",
        "final state before the last norm (speculators); `postnorm` / `both`",
        section="dump",
        preset_key="dump_final",
        choices=("prenorm", "postnorm", "both"),
    ),
    Var(
        DUMP_MAX_PENDING_MB,
        "int",
        4096,
        "host memory for in-flight samples (the forward waits, never drops); on GPU pinned once at start-up "
        "(per writer: one per DP group) as the staging buffer of the device→host copies. More than the machine's "
        "memory: an error; unset on a small machine: a quarter of its memory",
        section="dump",
        minimum=1,
    ),
    Var(
        DUMP_IO_THREADS,
        "int",
        8,
        "writer threads (file writes are fsync-latency bound: more threads, more overlap)",
        section="dump",
        minimum=1,
    ),
    Var(
        DUMP_MIN_TOKENS,
        "int",
        8,
        "shorter prompts are served, never dumped (SGLang's own warm-up request must not land in training data)",
        section="dump",
        minimum=1,
    ),
    Var(
        DUMP_COPY_STREAM,
        "bool",
        True,
        "device→host copies on a side CUDA stream, overlapping the next forward; `0`: on the compute stream",
        section="dump",
    ),
    Var(
        DUMP_ENCODING,
        "choice",
        "bf16",
        "`fp8`: e4m3 with a float32 scale per token and layer, 0.50× the bytes; readers and exporters decode it",
        section="dump",
        preset_key="dump_encoding",
        choices=("bf16", "fp8"),
    ),
    Var(
        DUMP_WRITER,
        "choice",
        "thread",
        "`process`: the files are written by a child process that maps the staging buffer (a shared memfd), so "
        "the file io does not share the scheduler's GIL; the server keeps a forwarder and a reader thread. A dead "
        "child stops dumping (serving continues). Measured no faster on an H200 host (below), and slower to the "
        "disk: `thread` stays the default",
        section="dump",
        preset_key="dump_writer",
        choices=("thread", "process"),
    ),
    Var(
        DUMP_DISCARD,
        "bool",
        False,
        "`1`: benchmarking aid — capture, copy and stitch, write nothing (warned at start-up; the dump client "
        "refuses such a server)",
        section="dump",
    ),
    Var(
        DUMP_RESPONSES,
        "bool",
        True,
        "with EAGLE-3 on (dump while serving, at the draft's layers): also capture the response's states from the "
        "TARGET_VERIFY batches and write prompt+response per finished request (aborted: nothing); `0`: prompts "
        "only, written at prefill",
        section="dump",
        preset_key="dump_responses",
    ),
    Var(
        DUMP_SAMPLE_RATE,
        "float",
        None,
        "fraction of requests dumped, 0..1 (a hash of the request id: the same choice on every rank and re-run)",
        section="dump",
        preset_key="dump_sample_rate",
        default_doc="`1`",
        minimum=0.0,
        maximum=1.0,
    ),
    Var(
        DUMP_MAX_ACCEPT_LEN,
        "float",
        None,
        "dump while serving: write only requests whose own accept length is below this number (where the draft "
        "is weakest)",
        section="dump",
        preset_key="dump_max_accept_len",
        minimum=1.0,
    ),
    Var(
        TRAIN_RECORD_SAMPLES,
        "path",
        None,
        "testing aid: each `train` rank appends one JSON line per epoch to this file (`rank`, `epoch`, the sample "
        "indices it trained on)",
    ),
    Var(
        TRAIN_STOP_AFTER_EPOCHS,
        "int",
        None,
        "testing aid: `train` stops (exit 2, as if interrupted) once this many epochs are checkpointed in its "
        "`--out`; `--resume` continues the run",
        minimum=1,
    ),
)
VARS: dict[str, Var] = {v.name: v for v in _VARS}


def _var(name: str) -> Var:
    try:
        return VARS[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in sglang_eagle3_ext/envs.py") from None


def raw(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The text of a declared variable as set (None when unset)."""
    _var(name)
    return (os.environ if env is None else env).get(name)


def is_set(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Set to a non-empty value."""
    return bool((raw(name, env) or "").strip())


def get(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The parsed value of a declared variable, its default when unset; EnvError on an illegal value."""
    var = _var(name)
    text = (os.environ if env is None else env).get(name)
    return var.default_value() if text is None else var.parse(text)


def problems(env: Mapping[str, str] | None = None) -> list[str]:
    """One message per declared variable set to an illegal value (for CLIs that check up front)."""
    out = []
    for name in VARS:
        try:
            get(name, env)
        except EnvError as e:
            out.append(str(e))
    return out


def environ() -> dict[str, str]:
    """A copy of this process's environment, for building a child process's environment."""
    return dict(os.environ)


def external(name: str, default: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """A variable that is not ours (CUDA_VISIBLE_DEVICES, ...): its raw text, read here so that the
    package reads the environment in one place."""
    return (os.environ if env is None else env).get(name, default)


def override_external(name: str, value: str):
    """Set a variable that is not ours (one a library reads when it loads, e.g. LOGURU_LEVEL) and return the
    function that puts the old value back."""
    old = os.environ.get(name)
    os.environ[name] = value

    def restore() -> None:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old

    return restore


def preset_keys() -> dict[str, str]:
    """eagle3_ext preset key -> variable."""
    return {v.preset_key: v.name for v in _VARS if v.preset_key}


def _default_text(v: Var) -> str:
    if v.default_doc:
        return v.default_doc
    if v.default is None:
        return "—"
    if v.type == "bool":
        return "`1`" if v.default else "`0`"
    return f"`{v.default}`"


def markdown(section: str) -> str:
    """The README table of one section."""
    rows = ["| variable | type | default | preset key | meaning |", "|---|---|---|---|---|"]
    for v in _VARS:
        if v.section != section:
            continue
        kind = v.type if v.type != "choice" else " \\| ".join(f"`{c}`" for c in v.choices)
        key = f"`{v.preset_key}`" if v.preset_key else ""
        rows.append(f"| `{v.name}` | {kind} | {_default_text(v)} | {key} | {v.doc} |")
    return "\n".join(rows)


SECTIONS = ("general", "dump")
BOOL_RULE = (
    'Booleans: `1/true/yes/on` or `0/false/no/off/""`; any other value is an error naming the variable. '
    "Declared once in `sglang_eagle3_ext/envs.py`; this table is generated from it "
    "(`python -m sglang_eagle3_ext.envs --update-readme README.md`)."
)


def readme_block(section: str) -> str:
    """What sits between the README's `<!-- envs:SECTION:start/end -->` markers."""
    return f"<!-- envs:{section}:start -->\n{markdown(section)}\n\n{BOOL_RULE}\n<!-- envs:{section}:end -->"


def sync_readme(text: str) -> str:
    """`text` with every envs block replaced by the registry's current tables."""
    for s in SECTIONS:
        text = re.sub(
            rf"<!-- envs:{s}:start -->.*?<!-- envs:{s}:end -->", lambda _m, s=s: readme_block(s), text, flags=re.S
        )
    return text


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m sglang_eagle3_ext.envs", description=__doc__.split("\n")[0], allow_abbrev=False
    )
    ap.add_argument("--markdown", action="store_true", help="print the README tables")
    ap.add_argument("--update-readme", metavar="README", help="rewrite the env tables of this README in place")
    ap.add_argument("--check", action="store_true", help="parse every set variable; non-zero on an illegal value")
    a = ap.parse_args(argv)
    if a.update_readme:
        with open(a.update_readme, encoding="utf-8") as f:
            old = f.read()
        new = sync_readme(old)
        if new != old:
            with open(a.update_readme, "w", encoding="utf-8") as f:
                f.write(new)
        print(f"{a.update_readme}: {'updated' if new != old else 'up to date'}")
        return 0
    if a.check:
        bad = problems()
        for msg in bad:
            print(f"{ap.prog}: error: {msg}", file=sys.stderr)
        return 2 if bad else 0
    for s in SECTIONS:
        print(readme_block(s) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
