"""`launch`'s command line beside SGLang's: every flag is ours or SGLang's.

launch_server passes what its own parser does not take to SGLang. A flag that is neither (a typo such as
`--dry-runn`) or that is abbreviated (`--dry-ru` of ours, `--mem-frac` of SGLang's `--mem-fraction-static`,
which SGLang's parser would take) is refused before anything is planned or started, naming the full flag:
flags are spelled out in full. The short forms SGLang's own documentation writes (`--tp 8`) are the exception.
"""

from __future__ import annotations

import argparse
import difflib

from ..boundary import Refused
from ..compat import server_flags
from ..options.parser import did_you_mean
from ..options.values import port
from ..versions import installed_version
from . import presets

# abbreviations SGLang's documentation uses in its own launch commands: taken as SGLang takes them
SGLANG_SHORT_FORMS = {"--tp": "--tp-size", "--dp": "--dp-size"}


def _ours(parser) -> list[str]:
    return sorted(s for s in parser._option_string_actions if s.startswith("--") and s != "--help")


def print_sglang_help() -> None:
    """--help-sglang: SGLang's own flags, which launch passes on unchanged."""
    try:
        presets.sglang_parser().print_help()
    except Exception as e:  # noqa: BLE001 - said in one line: the flags cannot be listed without SGLang
        raise Refused(
            f"--help-sglang: SGLang is not importable here ({type(e).__name__}: {e}); install it with "
            f"pip install 'sglang-eagle3-ext[sglang]'"
        ) from None


def _sglang_flags() -> tuple[set | dict | None, str]:
    """SGLang's option strings, and its version (None, "?" when SGLang is not here). Read statically from its
    source (a fraction of a second); its own parser (tens of seconds to import) only when that cannot be read."""
    import warnings

    static = server_flags.installed_flags()
    if static is not None:
        return static, installed_version() or "?"
    try:
        with warnings.catch_warnings():  # what importing SGLang says on a machine without its kernels
            warnings.simplefilter("ignore")
            _, version = presets.server_args_fields()
            return presets.sglang_parser()._option_string_actions, version
    except Exception:  # noqa: BLE001 - not importable: only near-misses of our own flags can be told
        return None, "?"


def check_flags(parser, ours, rest: list[str]) -> None:
    """Refused for a flag in `rest` that is neither ours nor SGLang's, or a port out of range; `--json` on
    stdout only with --dry-run."""
    if ours.json == "-" and not ours.dry_run and not ours.list_presets:
        raise Refused(
            "--json without PATH prints the plan of --dry-run: add --dry-run, or give --json PATH to "
            "keep the plan of a real launch"
        )
    _check_ports(rest)
    flags = [t.split("=", 1)[0] for t in _until_double_dash(rest) if t.startswith("--")]
    if not flags:
        return
    mine = _ours(parser)
    theirs, version = _sglang_flags()
    for opt in flags:
        if theirs is not None and opt in theirs:
            continue
        if any(f.startswith(opt) for f in (*mine, "--help")) or difflib.get_close_matches(opt, mine, n=1, cutoff=0.8):
            raise Refused(
                f"{opt}: not a flag of launch nor of SGLang{did_you_mean(opt, mine)} (flags are spelled "
                f"out in full; nothing was started)"
            )
        if theirs is None:
            continue  # SGLang not importable (--dry-run only): its own flags cannot be told apart
        matches = sorted(s for s in theirs if s.startswith(opt))
        if matches == [SGLANG_SHORT_FORMS.get(opt)]:
            continue
        if matches:
            raise Refused(
                f"{opt}: an abbreviation of SGLang's {' or '.join(matches[:3])}; flags are spelled out "
                f"in full{did_you_mean(opt, matches)} (nothing was started)"
            )
        raise Refused(
            f"{opt}: neither a flag of launch nor of SGLang {version}{did_you_mean(opt, [*mine, *theirs])}"
            f" (`launch --help` lists ours, `launch --help-sglang` SGLang's; nothing was started)"
        )


def _check_ports(rest: list[str]) -> None:
    """SGLang's port flags (`--port`, `--nccl-port`, ...) hold 1..65535: its parser takes any integer, and the
    server would fail only once the model is loaded."""
    words = _until_double_dash(rest)
    for i, word in enumerate(words):
        opt, eq, text = word.partition("=")
        if not (opt == "--port" or (opt.startswith("--") and opt.endswith("-port"))):
            continue
        text = text if eq else (words[i + 1] if i + 1 < len(words) else None)
        if text is None:
            continue  # SGLang's parser says the value is missing
        try:
            port(text)
        except argparse.ArgumentTypeError as e:
            raise Refused(f"{opt} {text}: {e}; give a free port such as 30000 (nothing was started)") from None


def _until_double_dash(rest: list[str]) -> list[str]:
    return rest[: rest.index("--")] if "--" in rest else rest
