"""The built-in tiny targets: small random DeepSeek-V3 models that SGLang serves, made on first use.

    sglang-eagle3 tiny [OUT] [--predictable] [--seed N] [--kimi]

Writes one (tiny/deepseek_v3.py; with --kimi the Kimi-K2.5 wrapper around it, tiny/kimi_k25.py) and prints
its folder.
"""
from __future__ import annotations

import argparse
import sys

from ..tiny import deepseek_v3
from . import common as cli_common


def build_parser() -> argparse.ArgumentParser:
    ap = cli_common.parser("tiny", cli_common.doc_description(__doc__))
    ap.add_argument("out", nargs="?", help=f"output folder, new or empty (default: the cache, "
                                           f"{deepseek_v3.default_dir()}); one holding other files is refused, one "
                                           f"holding this target is reused")
    ap.add_argument("--predictable", action="store_true",
                    help="the round trip's target: a greedy walk a draft can learn (tiny.PREDICTABLE)")
    ap.add_argument("--seed", type=int, default=0, help="weights' random seed")
    ap.add_argument("--kimi", action="store_true",
                    help="wrap it as Kimi-K2.5 (KimiK25ForConditionalGeneration + tiny vision tower; tiny/kimi_k25.py)")
    return cli_common.finish(ap, "tiny")


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.out and a.out.startswith("-"):  # never write a model into a folder named like an option
        raise cli_common.CliError(f"{a.out!r} looks like an option, not a folder; see --help")
    make = deepseek_v3.ensure_tiny_target
    if a.kimi:
        from ..tiny.kimi_k25 import ensure_tiny_kimi_target as make
    print(make(a.out, seed=a.seed, **(deepseek_v3.PREDICTABLE if a.predictable else {})))
    return 0


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("tiny", main))
