"""`python -m sglang_eagle3_ext.convert`: the same as `sglang-eagle3 convert` (the command lives in `cli/convert.py`)."""

from .cli.convert import main

if __name__ == "__main__":
    from .cli.common import run_tool

    raise SystemExit(run_tool("convert", main))
