"""`python -m sglang_eagle3_ext.check DRAFT [--target DIR] [--sglang-version X] [--scan-values]` (see draft/check.py)."""
import sys

from .draft.check import main

if __name__ == "__main__":
    sys.exit(main())
