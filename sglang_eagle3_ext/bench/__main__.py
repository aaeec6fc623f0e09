"""`python -m sglang_eagle3_ext.bench`: the same as `sglang-eagle3 bench`."""

from ..cli.bench import main
from ..cli.common import run_tool

raise SystemExit(run_tool("bench", main))
