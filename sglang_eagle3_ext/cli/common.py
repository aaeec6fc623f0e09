"""What every command of the package shares as it runs: exit codes, `--debug`, and one-line errors instead of
tracebacks (the parsers and the flags every command spells alike: cli/args.py).

Exit codes (the same in every tool, also under `sglang-eagle3 COMMAND`):

    0  success
    1  the tool ran and its verdict is negative (check found problems, bench FAIL, release unsupported)
    2  bad input or environment: a bad path, file, JSON, YAML, safetensors header, URL, an unreachable or
       silent server, a bad server reply, a missing optional package, an installed package that fails to
       import (the environment is broken: diagnosis.py), or a usage error (argparse's code)
    3  unexpected error: a bug; rerun with --debug (or SGLANG_EAGLE3_EXT_DEBUG=1) for the traceback
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import sys
import traceback

from .. import envs
from ..boundary import BadInput, Refused
from ..diagnosis import EXIT_BAD_INPUT, EXIT_INTERNAL, describe, raised_in_launched_module
from ..interrupts import EXIT_INTERRUPTED, exit_at_once_on_interrupt
from .commands import BY_NAME
from .naming import prog

EXIT_OK, EXIT_FAILED = 0, 1  # 2 and 3: diagnosis.describe tells them apart; 130: interrupts
ENV_DEBUG = envs.DEBUG


def debug_requested(argv=None) -> bool:
    if "--debug" in (argv or ()):
        return True
    try:
        return envs.get(ENV_DEBUG)
    except envs.EnvError as e:  # said once, then the tool runs without tracebacks
        print(f"warning: {e}", file=sys.stderr)
        return False


def error_line(tool: str, msg: str) -> str:
    """`PROG: error: MSG`, the one form of every tool's errors; a prefix the message brought along (a module's
    own `NAME: error:`) is replaced by the tool's."""
    import re

    head, sep, rest = msg.partition(": error: ")
    if sep and re.fullmatch(r"(python -m )?sglang_eagle3_ext[\w.]*|sglang-eagle3[\w -]*|[a-z_]+", head):
        msg = rest
    return f"{prog(tool)}: error: {msg}"


def run_tool(tool: str, main, argv=None) -> int:
    """Call a tool's `main(argv)`; turn any escaping error into one line on stderr and a documented exit code."""
    rc = _run_tool(tool, main, argv)
    if rc == EXIT_INTERRUPTED and argv is None:  # the process's own command line: it exits next
        exit_at_once_on_interrupt()
    return rc


def _run_tool(tool: str, main, argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(argv)
    try:
        rc = main(argv)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(error_line(tool, str(e.code)), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{prog(tool)}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `sglang-eagle3 ... | head`: the reader left, nothing went wrong here
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 - the one place every tool's errors become one line
        if raised_in_launched_module(e):  # SGLang's own server (launch runs it in-process): its error, its way
            traceback.print_exc()
            return 1
        if debug:
            traceback.print_exc()
        code, line = describe(e)
        said = isinstance(e, (Refused, BadInput))  # the message is the whole story
        hint = "" if debug or code == EXIT_INTERNAL or said else f"  [--debug or {ENV_DEBUG}=1: traceback]"
        print(error_line(tool, f"{line}{hint}"), file=sys.stderr)
        return code
    return EXIT_OK if rc is None else int(rc)


def entry(tool: str):
    """A console-script / `__main__` entry for one tool: `sys.exit(entry('check')())`."""
    import importlib

    def _main(argv=None) -> int:
        mod, fn = BY_NAME[tool].main.split(":")
        return run_tool(tool, getattr(importlib.import_module(f"sglang_eagle3_ext.{mod}"), fn), argv)

    return _main
