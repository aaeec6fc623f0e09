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
import sys

from ..json_file import write_json
from ..options.parser import add_options, options_from
from ..training.distributed import launched_rank
from ..training.options import FLAG_TYPES, TrainOptions, check_data
from ..training.report import TrainDraftError, what_out_holds
from ..training.train import train_draft
from . import args as cli_args
from . import common as cli_common
from .interrupts import interrupted_line, interruptible
from .output import library_output


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
    """The library's options from the parsed flags (--quiet: only the first and the last step's line)."""
    opts = options_from(a, TrainOptions)
    if getattr(a, "quiet", False):
        opts.log_every = 10**9  # progress prints the first and the last step whatever the interval
    if opts.select_by == "predicted-accept":
        from ..acceptance.select import epoch_scorer

        opts.epoch_scorer = epoch_scorer(opts, a.select_steps, a.select_samples)
    return opts


def main(argv: list[str] | None = None) -> int:
    import contextlib

    parser = cli_args.finish(build_parser(), "train")
    a = parser.parse_args(argv)
    missing = [] if a.dry_run else [f for f in ("data", "out") if getattr(a, f) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join('--' + f for f in missing)}")
    if a.data is not None:
        check_data(a.data)
    for flag in ("select_steps", "select_samples"):
        if getattr(a, flag) is not None and a.select_by != "predicted-accept":
            parser.error(
                f"--{flag.replace('_', '-')} applies to --select-by predicted-accept only; add it, or "
                f"leave the flag out"
            )
    stop = None
    try:  # with --json on stdout, the run's own lines go to stderr
        with (
            interruptible("train") as stop,
            contextlib.redirect_stdout(sys.stderr if a.json == "-" else sys.stdout),
            library_output(a.verbose, bars=True),
        ):
            result = train_draft(options_from_args(a))
    except (Exception, KeyboardInterrupt) as e:
        if not (stop and stop.received) and not isinstance(e, KeyboardInterrupt):
            if not isinstance(e, TrainDraftError):
                raise
            if getattr(e, "echo", True):  # a refusal every rank shares is printed by rank 0 only
                print(cli_common.error_line("train", str(e)), file=sys.stderr)
            return getattr(e, "exit_code", cli_common.EXIT_BAD_INPUT)
        if launched_rank() == 0:  # whatever the training made of it
            print(interrupted_line("train", what_out_holds(a.out)), file=sys.stderr)
        return cli_common.EXIT_INTERRUPTED
    if a.dry_run:
        from ..training.plan import plan_lines

        if a.json != "-":
            print("\n".join(plan_lines(result)))
    if a.json and launched_rank() == 0:
        write_json(a.json, result)
    return 0


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("train", main))
