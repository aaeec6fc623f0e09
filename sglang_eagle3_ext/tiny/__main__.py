"""`python -m sglang_eagle3_ext.tiny`: the same as `sglang-eagle3 tiny`."""

from ..cli.common import run_tool
from ..cli.tiny import main

raise SystemExit(run_tool("tiny", main))
