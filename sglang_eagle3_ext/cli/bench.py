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
from pathlib import Path

from ..bench import prompts as bench_prompts
from ..bench.report import render
from ..bench.run import MAX_CONCURRENCY, BenchOptions, benchmark
from . import common as cli_common
from .args import new_tokens
from .common import CliError
from .inputs import file_in, file_out, server_url
from .output import library_output

_LOG = file_in("give the server's log file (run with --decode-log-interval 1)")


def _levels(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers 1..{MAX_CONCURRENCY}, e.g. 1,8,32, got {s!r}"
        ) from None
    if not out or min(out) < 1 or max(out) > MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers 1..{MAX_CONCURRENCY}, e.g. 1,8,32, got {s!r}"
        )
    return out


def _add_prompt_flags(ap: argparse.ArgumentParser) -> None:
    src = ap.add_mutually_exclusive_group()
    src.add_argument(
        "--prompts",
        metavar="PATH",
        type=file_in("give a JSONL, ShareGPT JSON or MT-bench question.jsonl file"),
        help="JSONL, ShareGPT JSON or MT-bench question.jsonl "
        "(records: input_ids | text | prompt | messages | conversations | turns)",
    )
    src.add_argument(
        "--builtin", default="random-ids", choices=bench_prompts.BUILTIN, help="built-in prompt set when no --prompts"
    )
    ap.add_argument(
        "--target",
        metavar="DIR",
        help="target model dir or HF id: its tokenizer and chat template "
        "turn text/chat prompts into token ids (chat prompts need it; without it text is sent as text; "
        "a tokenizer is never loaded from a path the server names)",
    )
    cli_common.hidden_alias(ap, "--tokenizer", dest="target")
    ap.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let --target's tokenizer run the code it ships (only for a model you trust)",
    )
    ap.add_argument(
        "--num-prompts",
        type=cli_common.positive_int,
        default=None,
        help="prompts per run (default: every record of --prompts; built-in: max(16, 2 x concurrency))",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the built-in prompt set")
    ap.add_argument(
        "--vocab-size", type=cli_common.positive_int, default=4096, help="token-id range of the built-in prompt set"
    )
    ap.add_argument(
        "--max-new-tokens",
        type=new_tokens,
        default="64",
        metavar="N|LO:HI",
        help="greedy tokens per request (ignore_eos); LO:HI draws each request's count from that range "
        "(seeded by --seed, the same for both servers). Fixed lengths let a server without speculation "
        "finish and admit its requests in whole cohorts, which real traffic (answers of every "
        "length) never does; speculation's requests finish out of step and are admitted more often",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = cli_common.parser("bench", cli_common.doc_description(__doc__.split("\n\n", 1)[1]))
    ap.add_argument("--url", required=True, type=server_url, help="server with speculative decoding")
    ap.add_argument(
        "--baseline-url", type=server_url, help="the same target without speculative decoding (speedup, greedy check)"
    )
    _add_prompt_flags(ap)
    ap.add_argument(
        "--concurrency",
        type=_levels,
        default="1,8",
        metavar="N[,N..]",
        help="requests in flight; several levels run one after another, e.g. 1,8,32",
    )
    ap.add_argument(
        "--warmup",
        type=cli_common.non_negative_int,
        default=2,
        help="unmeasured requests per server before the first level",
    )
    ap.add_argument(
        "--timeout",
        type=cli_common.positive_float,
        default=300.0,
        metavar="S",
        help="seconds for one request, all of its reply included",
    )
    ap.add_argument(
        "--wait-for-server",
        type=cli_common.non_negative_float,
        default=60.0,
        metavar="S",
        help="seconds to wait, in all, for GET /health to answer before starting (0: do not wait)",
    )
    cli_common.add_json_out(ap)
    ap.add_argument(
        "--report",
        metavar="PATH",
        type=file_out("give the path of the HTML file to write", new_folder=True),
        help="write a self-contained HTML report with plots here (PNGs beside it; needs matplotlib for the plots)",
    )
    ap.add_argument("--fail-on-slower", action="store_true", help="exit 1 (not only warn) when slower than baseline")
    cli_common.add_verbosity(ap, quiet="no progress bar")
    ap.add_argument(
        "--spec-log",
        metavar="PATH",
        type=_LOG,
        help="the EAGLE-3 server's log, run with --decode-log-interval 1: "
        "what one iteration and one admission cost at each concurrency (bench/steps.py), and advice "
        "from it",
    )
    ap.add_argument("--baseline-log", metavar="PATH", type=_LOG, help="the baseline server's log, likewise")
    ap.add_argument(
        "--log-interval",
        type=cli_common.positive_int,
        default=1,
        metavar="N",
        help="the servers' --decode-log-interval",
    )
    return cli_common.finish(ap, "bench")


def _check_outputs(a) -> None:
    """--json / --report must be writable files-to-be, known before any server time is spent."""
    for flag, dest in (("--json", a.json if a.json != "-" else None), ("--report", a.report)):
        if not dest:
            continue
        p = Path(dest)
        if p.is_dir():
            raise CliError(f"{flag} {dest}: is a folder; give a file path")
        if flag == "--json" and not p.parent.is_dir():
            raise CliError(f"{flag} {dest}: no folder {p.parent}; create it or give another path")


def options_from_args(a: argparse.Namespace) -> BenchOptions:
    """The library's options from the parsed flags; the tokenizer is the one --target names, loaded (with its
    own code only under --trust-remote-code) when a prompt needs it."""
    tokenizer = None
    if a.target:

        def tokenizer():
            return cli_common.load_tokenizer(a.target, a.trust_remote_code, "--target")

    return BenchOptions(
        url=a.url,
        baseline_url=a.baseline_url,
        prompts=a.prompts,
        builtin=a.builtin,
        tokenizer=tokenizer,
        num_prompts=a.num_prompts,
        seed=a.seed,
        vocab_size=a.vocab_size,
        max_new_tokens=a.max_new_tokens,
        concurrency=tuple(a.concurrency),
        warmup=a.warmup,
        timeout=a.timeout,
        wait_for_server=a.wait_for_server,
        fail_on_slower=a.fail_on_slower,
        quiet=a.quiet,
        spec_log=a.spec_log,
        baseline_log=a.baseline_log,
        log_interval=a.log_interval,
    )


def main(argv=None) -> int:

    a = build_parser().parse_args(argv)
    _check_outputs(a)
    with library_output(a.verbose):
        res = benchmark(options_from_args(a))
    print(render(res), file=sys.stderr if a.json == "-" else sys.stdout)
    if a.json:
        cli_common.write_json(a.json, res)
    if a.report:
        from ..bench.report import write_report

        for p in write_report(a.report, res):
            print(f"report: {p}")
    return cli_common.EXIT_FAILED if res["status"] == "FAIL" else cli_common.EXIT_OK


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("bench", main))
