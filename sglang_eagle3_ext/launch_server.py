"""`python -m sglang_eagle3_ext.launch_server`: the same as `sglang-eagle3 launch` (the command lives in `cli/launch.py`)."""

from .cli.launch import main

if __name__ == "__main__":
    from .cli.common import run_tool

    raise SystemExit(run_tool("launch", main))
