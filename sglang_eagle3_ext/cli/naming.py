"""The name each tool goes by in its usage and error lines: `sglang-eagle3 TOOL` when run through the command,
else the `python -m sglang_eagle3_ext.MODULE` entry that ran it."""
from __future__ import annotations

COMMAND = "sglang-eagle3"
# subcommand of `sglang-eagle3` -> module of its `python -m sglang_eagle3_ext.MODULE` entry
MODULES = {"launch": "launch_server", "dump": "dump", "convert": "convert", "check": "check", "bench": "bench",
           "train": "train_draft", "compat": "compat", "tiny": "tiny", "patches": "cli.patches",
           "eval": "cli.eval", "swap": "cli.swap", "refresh": "cli.refresh"}

_via_command = False  # set by the `sglang-eagle3` dispatcher (cli/__init__.py)


def prog(tool: str) -> str:
    return f"{COMMAND} {tool}" if _via_command else f"python -m sglang_eagle3_ext.{MODULES.get(tool, tool)}"
