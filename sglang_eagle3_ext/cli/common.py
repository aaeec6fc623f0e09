"""What every command of the package shares as it runs: exit codes, `--debug`, and one-line errors instead of
tracebacks (the parsers and the flags every command spells alike: cli/args.py).

Exit codes (the same in every tool, also under `sglang-eagle3 COMMAND`):

    0  success
    1  the tool ran and its verdict is negative (check found problems, bench FAIL, release unsupported)
    2  bad input or environment: a bad path, file, JSON, YAML, safetensors header, URL, an unreachable or
       silent server, a bad server reply, a missing optional package, an installed package that fails to
       import (the environment is broken: environment_fault), or a usage error (argparse's code)
    3  unexpected error: a bug; rerun with --debug (or SGLANG_EAGLE3_EXT_DEBUG=1) for the traceback
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import json
import sys
import traceback

from .. import envs
from ..boundary import BadInput, Refused
from ..json_file import write_json
from .commands import BY_NAME
from .naming import prog

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
ENV_DEBUG = envs.DEBUG
# import name -> what to pip install (messages name installable things only)
PIP_NAMES = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py", "sklearn": "scikit-learn", "PIL": "pillow"}


def debug_requested(argv=None) -> bool:
    if "--debug" in (argv or ()):
        return True
    try:
        return envs.get(ENV_DEBUG)
    except envs.EnvError as e:  # said once, then the tool runs without tracebacks
        print(f"warning: {e}", file=sys.stderr)
        return False


def _file_being_read(e: BaseException) -> str | None:
    """The file a parse error came from, when the error itself does not say (json, yaml, safetensors errors
    carry no path): the innermost frame outside the parser with a local naming an existing file."""
    import os
    from pathlib import PurePath

    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for f in reversed(frames):
        mod = f.f_globals.get("__name__", "")
        if mod.startswith(("json", "yaml", "safetensors", "codecs")):
            continue
        paths = [str(v) for v in f.f_locals.values() if isinstance(v, (str, PurePath)) and 0 < len(str(v)) < 4096]
        for p in paths:
            if os.path.isfile(p):
                return p
        for p in paths:  # e.g. json.loads((src / "config.json").read_text()): only the folder is a local
            if os.path.isdir(p) and p not in (".", "/"):
                return f"a file in {p}"
    return None


def describe(e: BaseException) -> tuple[int, str]:
    """(exit code, one line) for an exception that reached a tool's top level."""
    mod = type(e).__module__ or ""
    if isinstance(e, Refused):
        return e.code, str(e)
    if isinstance(e, BadInput):  # its message already names the input and what it must be
        return EXIT_BAD_INPUT, str(e).replace("\n", " ")
    if isinstance(e, ModuleNotFoundError) and e.name:
        top = e.name.split(".")[0]
        return EXIT_BAD_INPUT, f"{top} is not installed here: pip install {PIP_NAMES.get(top, top)}"
    fault = environment_fault(e)
    if fault:
        return EXIT_BAD_INPUT, fault
    if isinstance(e, OSError) and getattr(e, "filename", None):
        return EXIT_BAD_INPUT, f"{e.filename}: {e.strerror or e}"
    if mod.startswith(("requests", "urllib3", "httpx")):
        return EXIT_BAD_INPUT, f"HTTP: {e}"
    what = (
        "not valid JSON"
        if isinstance(e, json.JSONDecodeError)
        else "not UTF-8 text"
        if isinstance(e, UnicodeDecodeError)
        else type(e).__name__
    )
    line = f"{what}: {e}".replace("\n", " ")
    if isinstance(e, (OSError, ValueError)) or mod.startswith(("yaml", "safetensors")):
        where = _file_being_read(e)
        return EXIT_BAD_INPUT, f"{where}: {line}" if where else line
    return EXIT_INTERNAL, f"unexpected {line} (a bug: rerun with --debug and report it)"


def _ours(module: str) -> bool:
    return module == "__main__" or module.split(".")[0] == "sglang_eagle3_ext"


def _importing(e: BaseException) -> str | None:
    """The third-party module whose import raised `e`: the innermost module-level frame of the traceback, when
    it is not ours and nothing of ours ran below it (our code called back from inside an import is ours)."""
    frames, tb = [], e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    at = [i for i, f in enumerate(frames) if f.f_code.co_name == "<module>"]
    if not at:
        return None
    names = [str(f.f_globals.get("__name__", "")) for f in frames[at[-1] :]]
    return names[0] if names[0] and not any(_ours(n) for n in names) else None


def _chain(e: BaseException) -> list[BaseException]:
    out = []
    while e is not None and e not in out and len(out) < 16:
        out.append(e)
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return out


def environment_fault(e: BaseException) -> str | None:
    """One line naming the installed package that failed to import, and the fix, when `e` (or what caused it)
    was raised while a third-party module was being imported: a package built for other versions of those it
    imports (PyPI's CUDA torchvision beside a CPU torch: `operator torchvision::nms does not exist`), a shared
    library missing, a name that release lacks. The environment is at fault, not this tool; None otherwise."""
    for err in _chain(e):
        mod = _importing(err)
        if not mod and isinstance(err, ImportError) and err.name and not _ours(err.name):
            mod = err.name  # `from X import Y` where the installed X lacks Y
        if mod:
            return _fault_line(mod, err)
    return None


def _fault_line(module: str, err: BaseException) -> str:
    import importlib.metadata as md
    import re

    def version(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return ""

    dist = (md.packages_distributions().get(module.split(".")[0]) or [module.split(".")[0]])[0]
    ver = version(dist)
    needs = (md.requires(dist) or []) if ver else []
    named = f"{dist} {ver}".strip() + ("" if module == dist else f" ({module})")
    first = (str(err).splitlines() or [""])[0][:200]
    fix = f"reinstall {dist} to fit the packages it imports"
    if dist != "torch" and any(re.match(r"torch\s*([<>=!~;\[(]|$)", r) for r in needs):
        fix = (
            f"install the {dist} built for the installed torch {version('torch') or '(none)'} (a CPU torch's: "
            "from https://download.pytorch.org/whl/cpu)"
        )
    return (
        f"the environment is broken, not this tool: importing {named} fails with {type(err).__name__}: {first}; "
        f"{fix}, or uninstall it where nothing needs it: pip uninstall {dist}"
    )


def error_line(tool: str, msg: str) -> str:
    """`PROG: error: MSG`, the one form of every tool's errors; a prefix the message brought along (a module's
    own `NAME: error:`) is replaced by the tool's."""
    import re

    head, sep, rest = msg.partition(": error: ")
    if sep and re.fullmatch(r"(python -m )?sglang_eagle3_ext[\w.]*|sglang-eagle3[\w -]*|[a-z_]+", head):
        msg = rest
    return f"{prog(tool)}: error: {msg}"


def _raised_in_launched_module(e: BaseException) -> bool:
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == "runpy":
            return True
        tb = tb.tb_next
    return False


def run_tool(tool: str, main, argv=None) -> int:
    """Call a tool's `main(argv)`; turn any escaping error into one line on stderr and a documented exit code."""
    rc = _run_tool(tool, main, argv)
    if rc == EXIT_INTERRUPTED and argv is None:  # the process's own command line: it exits next
        _exit_at_once_on_interrupt()
    return rc


def _exit_at_once_on_interrupt() -> None:
    """The command has said its interrupted line and leaves with 130: an interrupt from now on (one still on its
    way, or the user's next Ctrl-C while Python shuts down) ends the process at once with the same code, never
    as a death by the signal after the line."""
    import os
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, lambda signum, frame: os._exit(EXIT_INTERRUPTED))


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
        if _raised_in_launched_module(e):  # SGLang's own server (launch runs it in-process): its error, its way
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


def report(json_dest, rep: dict, text: str) -> int:
    """A command's report: JSON to --json's PATH (or alone on stdout with '-'), the text unless JSON took stdout."""
    if json_dest:
        write_json(json_dest, rep)
    if json_dest != "-":
        print(text)
    return EXIT_OK
