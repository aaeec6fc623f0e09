"""`sglang-eagle3 tune --target DIR --draft DIR --data DUMP --concurrency 1,4,16,32 [--budget-min N]`: the fastest
speculative settings for your own draft and traffic.

The accept length of every --speculative-num-steps 1..8 comes offline from one simulation of your dump (eval's,
topk 1); one short timing pass per attention backend the release and GPU offer (target-only and EAGLE-3 servers,
CUDA graphs on) gives each batch size's verify, draft step and draft extend; a cost model predicts tokens/s for
every (backend, steps, concurrency) and reports its error; only the best candidates per concurrency band are
started and timed with `bench` on your prompts (greedy outputs compared with the target alone). Written to
--out: a preset per band and, where the release has --speculative-adaptive, one preset with a fitted
--speculative-adaptive-config; timings.json; tune.json; a plot. Exit 0; 2 on bad input (one line naming it),
a backend the release lacks, a server command SGLang's own parser refuses (--server-args), or a budget below one
timing pass (GPU minutes count every GPU of a --tp-size server).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from ..boundary import BadInput, Refused, writable_dir
from ..tune.run import DEFAULT_BACKENDS
from . import common as cli_common
from .args import new_tokens
from .inputs import file_in, folder_in, folder_out, torch_device
from .interrupts import interrupted_exits
from .output import library_output


def _levels(s: str) -> list[int]:
    try:
        out = sorted({int(x) for x in s.replace(" ", "").split(",") if x})
    except ValueError:
        out = []
    if not out or min(out) < 1 or max(out) > 4096:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers 1..4096, e.g. 1,4,16,32, got {s!r}")
    return out


def _names(s: str) -> tuple:
    out = tuple(x for x in s.replace(" ", "").split(",") if x)
    if not out:
        raise argparse.ArgumentTypeError(f"{s!r}: comma-separated backend names, e.g. fa3,flashmla,triton")
    return out


def _add_inputs(p) -> None:
    """What tune reads: the target, the draft, the dump, the prompts."""
    p.add_argument(
        "--target", required=True, type=folder_in("give the target model's folder"), help="the target model's folder"
    )
    p.add_argument(
        "--draft",
        required=True,
        type=folder_in("give the draft's folder, in the layout SGLang serves"),
        help="the EAGLE-3 draft's folder, in the layout SGLang serves",
    )
    p.add_argument(
        "--data",
        required=True,
        type=folder_in(
            "give the dump folder `sglang-eagle3 dump` wrote (or a training export)",
            if_file="tune reads hidden states, not prompts: give a dump folder or a training export (prompts: "
            "--prompts)",
        ),
        help="your dump (or a training export): the accept side is simulated on its held-out samples",
    )
    p.add_argument(
        "--prompts",
        default=None,
        type=file_in("give a JSONL / ShareGPT / MT-bench prompts file"),
        help="your prompts (JSONL / ShareGPT / MT-bench) for the timed candidates (default: built-in random token ids)",
    )


def build_parser() -> argparse.ArgumentParser:

    p = cli_common.parser("tune", cli_common.doc_description(__doc__, paragraphs=2))
    _add_inputs(p)
    p.add_argument(
        "--concurrency", type=_levels, default="1,4,16,32", help="the concurrency bands to tune, e.g. 1,4,16,32"
    )
    p.add_argument(
        "--budget-min",
        type=cli_common.number_in(0.0, 1e6),
        default=None,
        help="GPU minutes the run may spend (servers up x GPUs); it stops starting servers there",
    )
    p.add_argument(
        "--backends",
        type=_names,
        default=",".join(DEFAULT_BACKENDS),
        help="attention backends to consider (those the release or GPU lack are left out, each with its reason)",
    )
    p.add_argument(
        "--out",
        default="tune_out",
        type=folder_out("give a new folder, or an earlier run's"),
        help="folder for the presets, timings.json, tune.json, the plot",
    )
    p.add_argument(
        "--timings",
        default=None,
        type=file_in("give the timings.json an earlier tune run wrote"),
        help="a timings.json of an earlier run: no timing pass",
    )
    p.add_argument(
        "--no-measure", action="store_true", help="no measurement of the top candidates: the model's predictions only"
    )
    p.add_argument(
        "--per-band", type=int, default=2, choices=range(1, 5), metavar="{1..4}", help="candidates measured per band"
    )
    p.add_argument(
        "--new-tokens", type=new_tokens, default="64:1024", help="the measurements' output lengths, N or LO:HI"
    )
    p.add_argument("--num-prompts", type=cli_common.positive_int, default=None, help="prompts per measurement")
    p.add_argument("--samples", type=cli_common.positive_int, default=64, help="held-out samples simulated")
    p.add_argument(
        "--heldout-fraction",
        type=cli_common.number_in(0.0, 1.0),
        default=0.05,
        help="the share `train` held out of --data (1: every sample)",
    )
    p.add_argument(
        "--device",
        default=None,
        type=torch_device,
        help="torch device of the simulation (default: cuda when there is one)",
    )
    p.add_argument(
        "--server-args",
        default="",
        help="more SGLang arguments for every server, one quoted string "
        '(e.g. "--mem-fraction-static 0.5 --max-total-tokens 65536"; default: none)',
    )
    p.add_argument("--trust-remote-code", action="store_true", help="let --target's tokenizer run its own code")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check every input and print the plan: backends and "
        "why, the servers a run starts, the budget; nothing loaded or started",
    )
    cli_common.add_json_out(p, "the report")
    cli_common.add_verbosity(p, quiet="no progress lines")
    return p


def main(argv: list[str] | None = None) -> int:
    from ..tune.run import Options, render, tune

    raw = list(sys.argv[1:] if argv is None else argv)
    p = build_parser()
    p._option_string_actions["--json"].type = None  # checked below once --out is known: a report may go inside it
    a = cli_common.finish(p, "tune").parse_args(argv)
    say = None if a.quiet or a.json == "-" else (lambda m: print(f"tune: {m}", file=sys.stderr, flush=True))
    tok = (lambda: cli_common.load_tokenizer(a.target, a.trust_remote_code)) if a.prompts else None
    opts = Options(
        target=a.target,
        draft=a.draft,
        data=a.data,
        concurrency=a.concurrency,
        prompts=a.prompts,
        budget_min=a.budget_min,
        backends=a.backends,
        out=a.out,
        dry_run=a.dry_run,
        timings=a.timings,
        measure=not a.no_measure,
        per_band=a.per_band,
        new_tokens=a.new_tokens,
        num_prompts=a.num_prompts,
        heldout_fraction=a.heldout_fraction,
        samples=a.samples,
        device=a.device,
        server_args=a.server_args,
        tokenizer=tok,
        say=say,
        command="sglang-eagle3 tune " + " ".join(shlex.quote(x) for x in raw),
    )
    try:
        in_out = _json_in_out(a.json, a.out)
        with interrupted_exits("tune", "the servers it started are stopped; run the same command again"):
            with library_output(a.verbose):
                rep = tune(opts)
        if in_out:  # a dry run makes no --out of its own
            writable_dir(a.out, "--out", make=True)
    except (Refused, BadInput) as e:
        print(cli_common.error_line("tune", str(e).replace("\n", " ")), file=sys.stderr)
        return getattr(e, "code", cli_common.EXIT_BAD_INPUT)
    return cli_common.report(a.json, rep, render(rep))


def _json_in_out(dest: str | None, out: str) -> bool:
    """--json checked before anything starts; whether it names a file right inside --out, which tune makes: then
    --out must be a folder this user can make or write into."""
    if dest and dest != "-":
        p = os.path.abspath(os.path.expanduser(dest))
        if os.path.dirname(p) == os.path.abspath(os.path.expanduser(out)) and not os.path.isdir(p):
            writable_dir(out, "--out")
            return True
    cli_common.check_json_dest(dest)
    return False


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("tune", main))
