"""`python -m sglang_eagle3_ext.convert SRC DST [--sglang X] [--hf-indices ...]` (see draft/convert.py)."""
import sys

from .draft.convert import main

if __name__ == "__main__":
    from .cli_common import run_tool

    sys.exit(run_tool("convert", main))
