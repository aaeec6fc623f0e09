"""`launch`'s command line beside SGLang's: every flag is ours or SGLang's, and the plan as JSON.

launch_server passes what its own parser does not take to SGLang. A flag that is neither (a typo such as
`--dry-runn`, or an abbreviation of one of ours such as `--dry-ru`, which SGLang's abbreviation rules could
turn into one of its own) is refused before anything is planned or started; SGLang's own flags keep SGLang's
rules (its parser accepts a unique abbreviation such as `--tp`).
"""
from __future__ import annotations

import difflib

from .common import CliError, did_you_mean, write_json


def _ours(parser) -> list[str]:
    return sorted(s for s in parser._option_string_actions if s.startswith("--") and s != "--help")


def _sglang_flags() -> tuple[dict | None, str]:
    """SGLang's option strings -> actions, and its version ({} unknown when SGLang is not importable here)."""
    import warnings

    try:
        from ..launch import presets

        with warnings.catch_warnings():   # what importing SGLang says on a machine without its kernels
            warnings.simplefilter("ignore")
            _, version = presets.server_args_fields()
            return presets.sglang_parser()._option_string_actions, version
    except Exception:  # noqa: BLE001 - not importable: only near-misses of our own flags can be told
        return None, "?"


def check_flags(parser, ours, rest: list[str]) -> None:
    """CliError for a flag in `rest` that is neither ours nor SGLang's; `--json` on stdout only with --dry-run."""
    if ours.json == "-" and not ours.dry_run and not ours.list_presets:
        raise CliError("--json without PATH prints the plan of --dry-run: add --dry-run, or give --json PATH to "
                       "keep the plan of a real launch")
    flags = [t.split("=", 1)[0] for t in _until_double_dash(rest) if t.startswith("--")]
    if not flags:
        return
    mine = _ours(parser)
    theirs, version = _sglang_flags()
    for opt in flags:
        if theirs is not None and opt in theirs:
            continue
        if any(f.startswith(opt) for f in (*mine, "--help")) or difflib.get_close_matches(opt, mine, n=1, cutoff=0.8):
            raise CliError(f"{opt}: not a flag of launch nor of SGLang{did_you_mean(opt, mine)} (flags are spelled "
                           f"out in full; nothing was started)")
        if theirs is None:
            continue   # SGLang not importable (--dry-run only): its own flags cannot be told apart
        matches = [s for s in theirs if s.startswith(opt)]
        if len(matches) == 1:
            continue   # SGLang's parser takes a unique abbreviation of its own flags
        what = (f"ambiguous among SGLang's {', '.join(sorted(matches)[:4])}" if matches else
                f"neither a flag of launch nor of SGLang {version}{did_you_mean(opt, [*mine, *theirs])}")
        raise CliError(f"{opt}: {what} (`launch --help` lists both; nothing was started)")


def _until_double_dash(rest: list[str]) -> list[str]:
    return rest[:rest.index("--")] if "--" in rest else rest


def write_plan(plan, ours) -> bool:
    """--json: the plan as JSON (to PATH, or alone on stdout). True when the text plan is still to be printed."""
    if ours.json:
        write_json(ours.json, plan.as_dict())
    return ours.json != "-"


def list_presets(ours) -> None:
    from ..launch import presets

    names = list(presets.available_presets())
    if ours.json:
        write_json(ours.json, names)
    if ours.json != "-":
        print("\n".join(names))
