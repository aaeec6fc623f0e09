"""`python -m sglang_eagle3_ext.compat`: the same as `sglang-eagle3 compat`."""

from ..cli.common import run_tool
from ..cli.compat import main

raise SystemExit(run_tool("compat", main))
