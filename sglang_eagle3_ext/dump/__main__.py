"""`python -m sglang_eagle3_ext.dump`: the same as `sglang-eagle3 dump`."""

from ..cli.common import run_tool
from ..cli.dump import main

raise SystemExit(run_tool("dump", main))
