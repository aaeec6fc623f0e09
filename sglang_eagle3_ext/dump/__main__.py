from ..cli.common import run_tool
from .client import main

raise SystemExit(run_tool("dump", main))
