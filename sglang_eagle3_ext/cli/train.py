"""Train a small EAGLE-3 draft with the speculators library from offline hidden-state files.

    sglang-eagle3 train --data DIR --target TARGET_DIR --out OUT \\
        [--epochs N] [--steps N] [--lr LR] [--device cuda|cpu] [--layer-ids 1,2,3] \\
        [--draft-vocab-size N] [--total-seq-len N] [--ttt-steps N] [--optimizer muon|adamw]

On several GPUs, one process per GPU under torchrun (every rank runs this same command; rank 0 writes OUT):

    torchrun --nproc-per-node 8 -m sglang_eagle3_ext train --data DIR --target TARGET_DIR --out OUT \\
        [--global-batch N] [--resume]

`--dry-run` prints the plan (parameters, memory per rank, tokens and time per step) without training.
`--select-by predicted-accept` keeps in OUT the epoch whose draft `eval` predicts the best accept length for on the
held-out split (default: the last epoch).

Llama drafts train with speculators' own trainer; MLA drafts (Kimi-K2.5's layout) with this package's own
loop, a PyTorch twin of the layer SGLang serves; DFlash drafts (block diffusion) with speculators' DFlash model
(--block-size, --mask-token-id).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from ..options.parser import add_options, options_from
from ..options.schema import flag_fields
from ..training.distributed import launched_rank
from ..training.options import FLAG_TYPES, ScoreOptions, TrainOptions, check_data
from ..training.plan import plan_lines
from ..training.report import TrainDraftError, what_out_holds
from ..training.train import train_draft
from . import args as cli_args
from .run import run_command


def add_train_flags(p, skip=()) -> None:
    """train's flags (TrainOptions' and the epoch score's) on `p`, a parser or an argument group; `skip`: the
    TrainOptions fields a command that trains sets itself (build: its folders, resuming, planning)."""
    for options_type in FLAG_TYPES:
        add_options(p, options_type, skip=skip)


def build_parser() -> argparse.ArgumentParser:

    p = cli_args.parser("train", cli_args.doc_description(__doc__))
    add_train_flags(p)
    cli_args.add_json_out(
        p, "the run's summary (steps, losses, accuracies, where the draft went, each epoch's score and the kept epoch)"
    )
    cli_args.add_verbosity(
        p,
        quiet="of the per-step lines only the first and the last one (the trainer's epoch bar stays)",
        verbose="also show speculators', transformers' and torch's logs, warnings and bars",
    )
    return p


def options_from_args(a: argparse.Namespace) -> TrainOptions:
    """The library's options from the parsed flags (--quiet: only the first and the last step's line), with the
    epoch scorer --select-by names (acceptance/select.py, as build's)."""
    from ..acceptance.select import scored

    opts = options_from(a, TrainOptions)
    if getattr(a, "quiet", False):
        opts.log_every = 10**9  # progress prints the first and the last step whatever the interval
    return scored(opts, a.select_steps, a.select_samples)


def check_score_flags(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """The epoch score's flags without --select-by predicted-accept: a usage error (train's and build's)."""
    for f in flag_fields(ScoreOptions):
        if getattr(a, f.name) is not None and a.select_by != "predicted-accept":
            flag = "--" + f.name.replace("_", "-")
            parser.error(f"{flag} applies to --select-by predicted-accept only; add it, or leave the flag out")


def _train(a: argparse.Namespace) -> dict:
    with contextlib.redirect_stdout(sys.stderr if a.json == "-" else sys.stdout):  # --json on stdout: lines to stderr
        return train_draft(options_from_args(a))


def main(argv: list[str] | None = None) -> int:
    parser = cli_args.finish(build_parser(), "train")
    a = parser.parse_args(argv)
    missing = [] if a.dry_run else [f for f in ("data", "out") if getattr(a, f) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join('--' + f for f in missing)}")
    if a.data is not None:
        check_data(a.data)
    check_score_flags(parser, a)
    first = launched_rank() == 0  # under torchrun rank 0 says the interrupt and writes the summary
    return run_command(
        "train",
        lambda: _train(a),
        (lambda plan: "\n".join(plan_lines(plan))) if a.dry_run else None,
        json=a.json,
        stopped=lambda: what_out_holds(a.out) if first else None,
        verbose=a.verbose,
        bars=True,
        errors=(TrainDraftError,),
        as_json=(lambda rep: rep) if first else None,
    )


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("train", main))
