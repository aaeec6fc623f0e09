"""The built-in tiny targets: small random DeepSeek-V3 models that SGLang serves, made on first use.

    sglang-eagle3 tiny [OUT] [--predictable] [--seed N] [--kimi]
    sglang-eagle3 tiny [OUT] --predictable --sample-dump DIR [--samples N] [--prompts FILE] [--dump-layers L]

Writes one (with --kimi the Kimi-K2.5 wrapper around it) and prints its folder. --sample-dump also writes a
small dump of its hidden states, computed on this machine's CPU, in the format a dumping server writes:
`dump export`, `train`, `eval` take it as they take a served dump (no GPU needed).
"""

from __future__ import annotations

import argparse
import sys

from ..options.parser import add_options, options_from
from ..tiny.options import SAMPLE_DUMP, SAMPLE_DUMP_TITLE, TinyOptions, make, refuse_mixups
from . import args as cli_args
from . import common as cli_common
from .naming import COMMAND
from .output import library_output


def build_parser() -> argparse.ArgumentParser:
    ap = cli_args.parser("tiny", cli_args.doc_description(__doc__))
    add_options(ap, TinyOptions, skip=SAMPLE_DUMP)
    add_options(ap.add_argument_group(SAMPLE_DUMP_TITLE), TinyOptions, only=SAMPLE_DUMP)
    return cli_args.finish(ap, "tiny")


def main(argv=None) -> int:
    o = options_from(build_parser().parse_args(argv), TinyOptions)
    refuse_mixups(o)
    with library_output(verbose=False, bars=True):  # our progress lines, not transformers' bars
        n = make(o, lambda target: print(target, flush=True))
    if o.sample_dump:
        print(
            f"wrote {n} samples into {o.sample_dump}; next: {COMMAND} dump export --dump-dir "
            f"{o.sample_dump} --to speculators --out DIR",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("tiny", main))
