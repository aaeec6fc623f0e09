"""`python -m sglang_eagle3_ext COMMAND ...`: the same as the `sglang-eagle3` command (see cli/__init__.py)."""

import sys

from .cli import main

sys.exit(main())
