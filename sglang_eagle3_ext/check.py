"""`python -m sglang_eagle3_ext.check`: the same as `sglang-eagle3 check` (the command lives in `cli/check.py`)."""

from .cli.check import main

if __name__ == "__main__":
    from .cli.common import run_tool

    raise SystemExit(run_tool("check", main))
