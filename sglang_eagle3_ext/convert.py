"""`python -m sglang_eagle3_ext.convert SRC DST [--sglang-version X] [--hf-indices ...]` (see draft/convert.py)."""
import sys

from .draft.convert import main

if __name__ == "__main__":
    sys.exit(main())
