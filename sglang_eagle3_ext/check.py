"""`python -m sglang_eagle3_ext.check DRAFT [--target DIR] [--sglang X] [--scan-values]` (see draft/check.py)."""
import sys

from .draft.check import main

if __name__ == "__main__":
    from .cli_common import run_tool

    sys.exit(run_tool("check", main))
