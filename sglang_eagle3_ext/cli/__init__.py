"""`sglang-eagle3 COMMAND ...` (also `python -m sglang_eagle3_ext COMMAND ...`): one command for every tool.

Each command is the same tool as its `python -m sglang_eagle3_ext.MODULE` entry (kept working), with the
same flags; `sglang-eagle3 COMMAND --help` shows every option with its default. Exit codes: see
`sglang_eagle3_ext/cli/common.py` (0 ok, 1 negative verdict, 2 bad input, 3 bug, 130 interrupted).
"""

from __future__ import annotations

import difflib
import sys

from . import common as cli_common
from . import naming
from .commands import BY_NAME, COMMANDS
from .naming import COMMAND


def version_line() -> str:
    from importlib import metadata

    from .. import __version__

    try:
        ours = metadata.version("sglang-eagle3-ext")
    except metadata.PackageNotFoundError:
        ours = __version__
    try:
        sgl = f"sglang {metadata.version('sglang')}"
    except metadata.PackageNotFoundError:
        sgl = "sglang not installed (pip install sglang, or pip install '.[sglang]' from a checkout)"
    return f"{COMMAND} {ours} ({sgl}; python {sys.version.split()[0]})"


def usage() -> str:
    width = max(len(c.name) for c in COMMANDS)
    lines = [f"usage: {COMMAND} [-h] [--version] COMMAND [options]", "", __doc__.split("\n")[0], "", "commands:"]
    lines += [f"  {c.name:{width}}  {c.summary}" for c in COMMANDS]
    lines += [
        "",
        f"`{COMMAND} COMMAND --help` for a command's options; --debug on any command shows "
        f"tracebacks (or {cli_common.ENV_DEBUG}=1).",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):  # a group without its subcommand: help on stderr, 2
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return cli_common.EXIT_OK if argv else cli_common.EXIT_BAD_INPUT
    if argv[0] in ("-V", "--version", "version"):
        print(version_line())
        return cli_common.EXIT_OK
    cmd, rest = argv[0], argv[1:]
    if cmd not in BY_NAME:
        near = difflib.get_close_matches(cmd, list(BY_NAME), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        print(f"{COMMAND}: error: unknown command {cmd!r}{hint} (choose from {', '.join(BY_NAME)})", file=sys.stderr)
        return cli_common.EXIT_BAD_INPUT
    return _as_command(cmd, rest)


def _as_command(cmd: str, argv=None) -> int:
    """Run a tool as `sglang-eagle3 CMD` (its usage and errors say so), in-process callers unaffected after."""
    with naming.as_command():
        return cli_common.entry(cmd)(argv)


def convert_main() -> int:  # the `sglang-eagle3-convert` console script (older name of `convert`)
    return _as_command("convert")


def check_main() -> int:  # the `sglang-eagle3-check` console script (older name of `check`)
    return _as_command("check")


if __name__ == "__main__":
    sys.exit(main())
