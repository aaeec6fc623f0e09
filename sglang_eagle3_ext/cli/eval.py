"""`sglang-eagle3 eval --draft DIR --data DIR [--steps 3] [--url URL]`: a draft's served accept length, predicted
offline.

Runs the draft on held-out samples of a dump (or a training export) exactly as SGLang's EAGLE-3 worker runs it
with --speculative-eagle-topk 1 -- the first draft step on the target's captured states, later steps on the
draft's own states and tokens, d2t applied, greedy acceptance against the target's recorded tokens (a DFlash
draft as the DFLASH worker runs it: one block of --steps drafts per round from the bonus token) -- and reports
P(draft token k accepted | tokens < k accepted), the accept length as SGLang reports it, and, with --url, the
figure a running server gives on the same prompts. The accept length is SGLang's own figure
(avg_spec_accept_length: accepted drafts + 1 per verify round); the per-request one (meta_info
spec_accept_length: tokens / rounds, cut at max_new_tokens) stands beside it. The held-out split is the one
`train` holds out of the same files. Local inputs are checked before any server is asked. Exit 0; 2 on bad
input (one line naming the input and the fix), a server setting eval does not simulate, or a served figure no
server with these settings can report (the report still lists it).
"""

from __future__ import annotations

import argparse
import sys

from ..acceptance.evaluate import DTYPES, Options, evaluate, render
from ..boundary import BadInput, Refused
from . import common as cli_common
from .common import CliError
from .inputs import folder_in, server_url, torch_device
from .interrupts import interrupted_exits
from .output import library_output

DEFAULT_STEPS = 3
# Bounds on the flags that size the work: refused up front rather than computing for hours or exhausting memory
MAX_STEPS = 16  # draft steps simulated per anchor (each one a forward over every row)
MAX_TOPK = 64
MAX_SAMPLES = 10_000_000
MAX_BATCH_TOKENS = 1 << 20  # rows of one simulated batch
MAX_CONCURRENCY = 1024
MAX_TIMEOUT_S = 86_400.0


def int_between(low: int, high: int):
    """An argparse `type`: an integer in [low, high]; argparse names the flag."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or not low <= v <= high:
            raise argparse.ArgumentTypeError(f"expected an integer in [{low}, {high}], got {text!r}")
        return v

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


def build_parser() -> argparse.ArgumentParser:

    p = cli_common.parser("eval", cli_common.doc_description(__doc__, paragraphs=2))
    p.add_argument(
        "--draft",
        required=True,
        type=folder_in("give the draft's folder, in the layout SGLang serves"),
        help="the draft's folder, in the layout SGLang serves (a speculators "
        "checkpoint: `sglang-eagle3 convert` it first)",
    )
    p.add_argument(
        "--data",
        required=True,
        type=folder_in(
            "give a dump folder or a training export (`dump export --to speculators`)",
            if_file="eval reads hidden states, not prompts: give a dump folder or a training export",
        ),
        help="a dump dir (dump_meta.json + manifests) or a training export "
        "(hs_{i}.safetensors, `dump export --to speculators`)",
    )
    p.add_argument(
        "--target",
        default=None,
        type=folder_in("give the target model's folder"),
        help="the target model's folder: its embeddings (and lm_head when the "
        "draft shares it), as a server installs them (default: the model path the data records)",
    )
    p.add_argument(
        "--steps",
        type=int_between(1, MAX_STEPS),
        default=DEFAULT_STEPS,
        help=f"--speculative-num-steps of the server to predict, 1..{MAX_STEPS} (a DFlash draft: its block size - 1, "
        "the drafts one verify round judges)",
    )
    p.add_argument(
        "--topk", type=int_between(1, MAX_TOPK), default=1, help="--speculative-eagle-topk (only 1 is simulated)"
    )
    p.add_argument(
        "--draft-tokens",
        type=int_between(1, MAX_STEPS + 1),
        default=None,
        help="--speculative-num-draft-tokens (with topk 1: steps + 1, the default)",
    )
    p.add_argument(
        "--heldout-fraction",
        type=cli_common.number_in(0.0, 1.0),
        default=0.05,
        help="the share `train` holds out (1 - train's --train-ratio); 1: every sample",
    )
    p.add_argument(
        "--samples",
        type=int_between(1, MAX_SAMPLES),
        default=None,
        help=f"evaluate at most this many held-out samples (the first ones), 1..{MAX_SAMPLES:_}; default: all",
    )
    p.add_argument(
        "--device", default=None, type=torch_device, help="torch device (default: cuda when there is one, else cpu)"
    )
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="weights and activations (bf16: as served)")
    p.add_argument(
        "--batch-tokens",
        type=int_between(1, MAX_BATCH_TOKENS),
        default=8192,
        help=f"tokens simulated at once, 1..{MAX_BATCH_TOKENS}",
    )
    _add_server_args(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check every local input and print the plan (held-out "
        "samples, settings) in seconds; no weight is loaded, no sample simulated, no request sent",
    )
    cli_common.add_json_out(p, "the report")
    cli_common.add_verbosity(p, quiet="no progress lines")
    return p


def _add_server_args(p: argparse.ArgumentParser) -> None:
    """--url and the flags of its requests: the served accept length measured beside the prediction."""
    p.add_argument(
        "--url",
        default=None,
        type=server_url,
        help="a running EAGLE-3 server of this draft: send it the same held-out "
        "prompts and report its accept length beside the prediction",
    )
    p.add_argument(
        "--concurrency",
        type=int_between(1, MAX_CONCURRENCY),
        default=8,
        help=f"requests in flight with --url, 1..{MAX_CONCURRENCY}",
    )
    p.add_argument(
        "--timeout",
        type=cli_common.number_in(0.0, MAX_TIMEOUT_S),
        default=300.0,
        help=f"seconds for each request with --url, at most {MAX_TIMEOUT_S:g}",
    )


def _check_json(dest: str | None) -> None:
    from pathlib import Path

    if not dest or dest == "-":
        return
    p = Path(dest)
    if p.is_dir():
        raise CliError(f"--json {dest}: is a folder; give a file path")
    if not p.parent.is_dir():
        raise CliError(f"--json {dest}: no folder {p.parent}; create it or give another path")


def main(argv: list[str] | None = None) -> int:

    a = cli_common.finish(build_parser(), "eval").parse_args(argv)
    say = None if a.quiet or a.json == "-" else (lambda m: print(f"eval: {m}", file=sys.stderr, flush=True))
    opts = Options(
        draft=a.draft,
        data=a.data,
        target=a.target,
        steps=a.steps,
        topk=a.topk,
        draft_tokens=a.draft_tokens,
        heldout_fraction=a.heldout_fraction,
        samples=a.samples,
        device=a.device,
        dtype=a.dtype,
        url=a.url,
        concurrency=a.concurrency,
        timeout=a.timeout,
        batch_tokens=a.batch_tokens,
        say=say,
        dry_run=a.dry_run,
    )
    try:
        _check_json(a.json)
        with interrupted_exits("eval", "no report was written; run the same command again"), library_output(a.verbose):
            rep = evaluate(opts)
    except (Refused, BadInput) as e:  # names the input and the fix
        print(cli_common.error_line("eval", str(e).replace("\n", " ")), file=sys.stderr)
        return getattr(e, "code", cli_common.EXIT_BAD_INPUT)
    code = cli_common.report(a.json, rep, render(rep))
    odd = (rep.get("served") or {}).get("implausible")
    if odd:  # a reply taken on trust would make the comparison meaningless: the report says which figure
        print(
            cli_common.error_line(
                "eval",
                f"--url {a.url}: a served figure no server at --steps {a.steps} can "
                f"report: {odd[0]}" + (f" (+{len(odd) - 1} more)" if len(odd) > 1 else "") + "; see served.implausible",
            ),
            file=sys.stderr,
        )
        return cli_common.EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("eval", main))
