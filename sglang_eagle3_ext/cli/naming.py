"""The name each tool goes by in its usage and error lines: `sglang-eagle3 TOOL` when run through the command,
else the `python -m sglang_eagle3_ext.MODULE` entry that ran it."""

from __future__ import annotations

import contextlib

from .commands import BY_NAME

COMMAND = "sglang-eagle3"

_via_command = False  # inside the `sglang-eagle3` dispatcher (cli/__init__.py)


@contextlib.contextmanager
def as_command():
    """Usage and error lines say `sglang-eagle3 TOOL` inside; in-process callers are unaffected after."""
    global _via_command
    was, _via_command = _via_command, True
    try:
        yield
    finally:
        _via_command = was


def called_as_command() -> bool:
    return _via_command


def prog(tool: str) -> str:
    return (
        f"{COMMAND} {tool}"
        if _via_command
        else f"python -m sglang_eagle3_ext.{BY_NAME[tool].module if tool in BY_NAME else tool}"
    )
