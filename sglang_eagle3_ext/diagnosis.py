"""What an error that reached the top means for the user: bad input (exit 2: the message names the input and
what it must be), a broken environment (exit 2: an installed package that fails to import, named with its fix), or
a bug (exit 3). `describe` gives a command's exit code and one line (cli/common.run_tool); `environment_fault`
also names the package when a start-up route is disabled (_activate). Imports nothing heavy."""

from __future__ import annotations

import json

from .boundary import BadInput, Refused

EXIT_BAD_INPUT, EXIT_INTERNAL = 2, 3
# import name -> what to pip install (messages name installable things only)
PIP_NAMES = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py", "sklearn": "scikit-learn", "PIL": "pillow"}


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


def raised_in_launched_module(e: BaseException) -> bool:
    """`e` came from a module run as a program in this process (runpy: SGLang's own server, which launch runs
    in-process): its error, to be reported its own way."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == "runpy":
            return True
        tb = tb.tb_next
    return False
