"""`python -m sglang_eagle3_ext.train_draft`: the same as `sglang-eagle3 train` (the command lives in `cli/train.py`)."""

from .cli.train import main

if __name__ == "__main__":
    from .cli.common import run_tool

    raise SystemExit(run_tool("train", main))
