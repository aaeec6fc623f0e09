"""tune's server commands as the installed SGLang reads them, from its own parser (`ServerArgs.add_cli_args`): each
setting spelled as that release spells it (never a deprecated alias, which a later release drops), every command
parsed before it is printed or started, the GPUs one server holds, and SGLang's cap on an EAGLE server's running
requests lifted where a concurrency band needs more. Without SGLang (a dry run on another machine) the field
names' own spelling is used and nothing is parsed."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import shlex

from ..boundary import Refused
from ..server.started import eagle3_chain_args

# sglang/srt/arg_groups/speculative_hook.py `_handle_eagle_family` (0.5.16, 0.5.23): an EAGLE server started
# without --max-running-requests runs at most 48 requests at once
EAGLE_DEFAULT_MAX_RUNNING = 48
# the decode CUDA graphs' largest batch, newest field first: 0.5.16 keeps --cuda-graph-max-bs as a deprecated alias
# of --cuda-graph-max-bs-decode, 0.5.23 has no alias; older releases have only cuda_graph_max_bs
GRAPH_MAX_BS_FIELDS = ("cuda_graph_max_bs_decode", "cuda_graph_max_bs")


@functools.lru_cache(maxsize=1)
def sglang_parser() -> argparse.ArgumentParser | None:
    """SGLang's own parser (None: SGLang cannot be imported here)."""
    try:
        from ..launch.presets import sglang_parser as make
    except ImportError:
        return None
    try:
        return make()
    except ImportError:
        return None


def _deprecated(a: argparse.Action) -> bool:
    return type(a).__name__.startswith("Deprecated")


def flag_for(parser: argparse.ArgumentParser | None, dest: str) -> str | None:
    """The flag the release writes `dest` with: the field's own name where the parser has it, else another spelling
    that is no deprecated alias; None where the release has no such flag."""
    own = "--" + dest.replace("_", "-")
    if parser is None:
        return own
    acts = [a for a in parser._actions if a.dest == dest and a.option_strings and not _deprecated(a)]
    for a in acts:
        if own in a.option_strings:
            return own
    return acts[0].option_strings[0] if acts else None


def graph_max_bs_field(parser: argparse.ArgumentParser | None) -> str:
    for f in GRAPH_MAX_BS_FIELDS:
        if flag_for(parser, f):
            return f
    raise Refused(
        f"this SGLang has no flag for the decode CUDA graphs' largest batch ({', '.join(GRAPH_MAX_BS_FIELDS)}); "
        f"run `sglang-eagle3 compat` and install a supported release"
    )


def chain_fields(steps: int, draft) -> dict:
    """The shared EAGLE-3 chain flags (server/started.py) as ServerArgs fields."""
    words = eagle3_chain_args(steps, draft)
    return {w[2:].replace("-", "_"): v for w, v in zip(words[::2], words[1::2])}


def spell(fields: dict, parser: argparse.ArgumentParser | None) -> list[str]:
    """ServerArgs fields (plain values) -> the words the release's parser takes."""
    out: list[str] = []
    for dest, value in fields.items():
        flag = flag_for(parser, dest)
        if flag is None:
            raise Refused(f"this SGLang has no command-line flag for {dest}; install a supported release")
        out += [flag, str(value)]
    return out


def parse_error(words: list[str], parser: argparse.ArgumentParser) -> str | None:
    """SGLang's parser's complaint about `words`, one line (None: they parse)."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            parser.parse_args(words)
    except SystemExit:
        said = [ln.split("error:", 1)[1].strip() for ln in buf.getvalue().splitlines() if "error:" in ln]
        return (said[-1] if said else " ".join(buf.getvalue().split())[-200:]) or "exits without serving"
    except Exception as e:  # noqa: BLE001 - a type or action of SGLang's that raises on the value
        return f"{type(e).__name__}: {e}"
    return None


def check_commands(commands: list[list[str]], parser: argparse.ArgumentParser | None, server_args: str) -> None:
    """Every command parses with SGLang's own parser, else Refused naming the first that does not."""
    if parser is None:
        return
    for words in commands:
        why = parse_error(words, parser)
        if why:
            raise Refused(
                f"--server-args {server_args!r}: SGLang's own parser refuses the server command "
                f"`{shlex.join(words)}` ({why}); give arguments this SGLang takes"
            )


def _parsed(words: list[str], parser: argparse.ArgumentParser | None) -> argparse.Namespace | None:
    if parser is None or parse_error(words, parser):
        return None
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return parser.parse_args(words)


def gpus_per_server(words: list[str], parser: argparse.ArgumentParser | None) -> int:
    """GPUs one server of `words` holds: --tp-size x --pp-size (1 where SGLang cannot parse here)."""
    ns = _parsed(words, parser)
    if ns is None:
        return 1
    tp = getattr(ns, "tp_size", None) or getattr(ns, "tensor_parallel_size", None) or 1
    pp = getattr(ns, "pp_size", None) or getattr(ns, "pipeline_parallel_size", None) or 1
    return int(tp) * int(pp)


def tp_size(words: list[str], parser: argparse.ArgumentParser | None) -> int:
    ns = _parsed(words, parser)
    return int((getattr(ns, "tp_size", None) or getattr(ns, "tensor_parallel_size", None) or 1) if ns else 1)


def user_sets(extra: list[str], dest: str, parser: argparse.ArgumentParser | None) -> bool:
    """Whether the user's own server arguments set `dest` (abbreviations and --x=v as SGLang reads them)."""
    if parser is None:
        return flag_for(None, dest) in [w.split("=", 1)[0] for w in extra]
    saved = [(a, a.default, a.required) for a in parser._actions]
    try:
        for a in parser._actions:
            a.default, a.required = argparse.SUPPRESS, False
        ns = _parsed(list(extra), parser)
        return ns is not None and hasattr(ns, dest)
    finally:
        for a, default, required in saved:
            a.default, a.required = default, required


def eagle_max_running(concurrency: int, user_set: bool = False) -> int | None:
    """--max-running-requests an EAGLE-3 server needs to run `concurrency` requests at once: SGLang caps one started
    without it at EAGLE_DEFAULT_MAX_RUNNING; None where that cap does not bind or the user set it."""
    if user_set or concurrency <= EAGLE_DEFAULT_MAX_RUNNING:
        return None
    return concurrency


def running_decision(concurrency: int, user_set: bool) -> str | None:
    """The decision eagle_max_running makes for the highest concurrency, with its reason (None: none made)."""
    if eagle_max_running(concurrency, user_set) is None:
        return None
    return (
        f"EAGLE-3 servers get --max-running-requests {concurrency}: SGLang runs an EAGLE server at most "
        f"{EAGLE_DEFAULT_MAX_RUNNING} requests at once unless told, and --concurrency reaches {concurrency}"
    )
