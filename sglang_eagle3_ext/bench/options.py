"""One benchmark run's options; each field with a command line is declared here once (`options.schema.flag`), in
the order `bench --help` lists them, and `cli/bench.py` derives its parser from it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Callable

from ..options import values
from ..options.schema import flag
from .prompts import BUILTIN

MAX_CONCURRENCY = 4096  # requests in flight (one client thread each)
LOG_FILE = values.file_in("give the server's log file (run with --decode-log-interval 1)")


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


@dataclasses.dataclass(kw_only=True)
class BenchOptions:
    """One benchmark run; field names are the `bench` flags' (`--baseline-url` -> `baseline_url`)."""

    # the server with speculative decoding
    url: str = flag(required=True, type=values.server_url, help="server with speculative decoding")
    # the same target without: speedup and the greedy check
    baseline_url: str | None = flag(
        None, type=values.server_url, help="the same target without speculative decoding (speedup, greedy check)"
    )
    # a prompt file (bench/prompts.py); None: the built-in set
    prompts: str | None = flag(
        None,
        metavar="PATH",
        type=values.file_in("give a JSONL, ShareGPT JSON or MT-bench question.jsonl file"),
        help="JSONL, ShareGPT JSON or MT-bench question.jsonl "
        "(records: input_ids | text | prompt | messages | conversations | turns)",
    )
    builtin: str = flag("random-ids", choices=BUILTIN, help="built-in prompt set when no --prompts")
    tokenizer: Callable[[], object] | None = None  # gives the target's tokenizer (text/chat prompts)
    target: str | None = flag(  # the command loads its tokenizer (tokenizer above)
        None,
        metavar="DIR",
        aliases="--tokenizer",
        help="target model dir or HF id: its tokenizer and chat template "
        "turn text/chat prompts into token ids (chat prompts need it; without it text is sent as text; "
        "a tokenizer is never loaded from a path the server names)",
    )
    trust_remote_code: bool = flag(
        False, action="store_true", help="let --target's tokenizer run the code it ships (only for a model you trust)"
    )
    num_prompts: int | None = flag(
        None,
        type=values.positive_int,
        help="prompts per run (default: every record of --prompts; built-in: max(16, 2 x concurrency))",
    )
    seed: int = flag(0, type=int, help="seed of the built-in prompt set")
    vocab_size: int = flag(4096, type=values.positive_int, help="token-id range of the built-in prompt set")
    # each request's greedy tokens drawn from LO..HI
    max_new_tokens: tuple[int, int] = flag(
        (64, 64),
        parser_default="64",
        type=values.new_tokens,
        metavar="N|LO:HI",
        help="greedy tokens per request (ignore_eos); LO:HI draws each request's count from that range "
        "(seeded by --seed, the same for both servers). Fixed lengths let a server without speculation "
        "finish and admit its requests in whole cohorts, which real traffic (answers of every "
        "length) never does; speculation's requests finish out of step and are admitted more often",
    )
    concurrency: tuple[int, ...] = flag(
        (1, 8),
        parser_default="1,8",
        type=_levels,
        metavar="N[,N..]",
        help="requests in flight; several levels run one after another, e.g. 1,8,32",
    )
    warmup: int = flag(2, type=values.non_negative_int, help="unmeasured requests per server before the first level")
    timeout: float = flag(
        300.0, type=values.positive_float, metavar="S", help="seconds for one request, all of its reply included"
    )
    wait_for_server: float = flag(
        60.0,
        type=values.non_negative_float,
        metavar="S",
        help="seconds to wait, in all, for GET /health to answer before starting (0: do not wait)",
    )
    report: str | None = flag(  # written by the command, after the run
        None,
        metavar="PATH",
        type=values.file_out("give the path of the HTML file to write", new_folder=True),
        help="write a self-contained HTML report with plots here (PNGs beside it; needs matplotlib for the plots)",
    )
    fail_on_slower: bool = flag(False, action="store_true", help="exit 1 (not only warn) when slower than baseline")
    quiet: bool = False  # no progress bar
    # the servers' logs (--decode-log-interval log_interval)
    spec_log: str | None = flag(
        None,
        metavar="PATH",
        type=LOG_FILE,
        help="the EAGLE-3 server's log, run with --decode-log-interval 1: "
        "what one iteration and one admission cost at each concurrency (bench/steps.py), and advice "
        "from it",
    )
    baseline_log: str | None = flag(None, metavar="PATH", type=LOG_FILE, help="the baseline server's log, likewise")
    log_interval: int = flag(1, type=values.positive_int, metavar="N", help="the servers' --decode-log-interval")
