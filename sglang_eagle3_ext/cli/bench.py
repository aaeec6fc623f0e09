"""Acceptance benchmark: `sglang-eagle3 bench --url SPEC [--baseline-url BASE] [--concurrency 1,8,32] [--report R.html]`.

Sends a prompt set with greedy decoding to a server with speculative decoding (and to a baseline without,
same target), at each concurrency level, and reports per level: accept length, how often draft token 1,
2, 3 ... is accepted (from SGLang's per-request `meta_info`: `spec_verify_ct`, `spec_accept_histogram`),
output tokens/s and the speedup over the baseline; as a table, as JSON (--json) and as a self-contained
HTML report with plots (--report; PNGs also written beside it).
Verdict: FAIL (exit 1) when the draft is evidently unused (accept length <= 1.05), when the server reports
no speculative statistics, or when greedy outputs differ from the baseline's; WARNING (exit 0, or 1 with
--fail-on-slower) when speculation is slower than the baseline. Bad input, an unreachable server or one
that does not answer within --timeout / --wait-for-server: exit 2 with one line saying which.
"""

from __future__ import annotations

import argparse
import sys

from ..bench.report import render
from ..bench.run import BenchOptions, benchmark
from ..options.parser import add_options, options_from
from ..server.tokenizer import load_tokenizer
from . import args as cli_args
from . import common as cli_common
from .run import json_in_existing_folder, run_command


def build_parser() -> argparse.ArgumentParser:
    ap = cli_args.parser("bench", cli_args.doc_description(__doc__.split("\n\n", 1)[1]))
    add_options(ap, BenchOptions, only=("url", "baseline_url"))
    add_options(ap.add_mutually_exclusive_group(), BenchOptions, only=("prompts", "builtin"))
    add_options(ap, BenchOptions, only=("target", "trust_remote_code"))
    flags = ("num_prompts", "seed", "vocab_size", "max_new_tokens", "concurrency", "warmup", "timeout")
    add_options(ap, BenchOptions, only=(*flags, "wait_for_server"))
    cli_args.add_json_out(ap)
    add_options(ap, BenchOptions, only=("report", "fail_on_slower"))
    cli_args.add_verbosity(ap, quiet="no progress bar")
    add_options(ap, BenchOptions, only=("spec_log", "baseline_log", "log_interval"))
    return cli_args.finish(ap, "bench")


def options_from_args(a: argparse.Namespace) -> BenchOptions:
    """The library's options from the parsed flags; the tokenizer is the one --target names, loaded (with its
    own code only under --trust-remote-code) when a prompt needs it."""
    tokenizer = None
    if a.target:

        def tokenizer():
            return load_tokenizer(a.target, a.trust_remote_code, "--target")

    return options_from(a, BenchOptions, tokenizer=tokenizer, concurrency=tuple(a.concurrency), quiet=a.quiet)


def main(argv=None) -> int:

    a = build_parser().parse_args(argv)

    def verdict(res: dict) -> int:
        if a.report:
            from ..bench.report import write_report

            for p in write_report(a.report, res):
                print(f"report: {p}")
        return cli_common.EXIT_FAILED if res["status"] == "FAIL" else cli_common.EXIT_OK

    return run_command(
        "bench",
        lambda: benchmark(options_from_args(a)),
        render,
        json=a.json,
        json_check=json_in_existing_folder,  # --report's kind is checked by its type
        verbose=a.verbose,
        text_beside_json=True,
        verdict=verdict,
    )


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("bench", main))
