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
import dataclasses
import sys

from ..options.values import folder_in, folder_out
from ..training.distributed import torchrun_env
from ..training.options import ATTN_IMPLS, DEFAULT_EPOCHS, DEVICES, LOSS_IMPLS, OPTIMIZERS, SCHEDULERS, TrainOptions
from ..training.report import TrainDraftError
from ..training.selection import SELECT_BY
from ..training.train import ROUTES, train_draft
from . import common as cli_common
from .common import non_negative_int, number_in, positive_int
from .interrupts import interrupted_line, interruptible
from .output import library_output

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainOptions)}


positive_number, _ratio = number_in(0.0, float("inf")), number_in(0.0, 1.0)
_EXPORT = "sglang-eagle3 dump export --dump-dir DUMP --to speculators --out DIR"
# train reads exported hidden states; a prompts file is the mix-up to name: it is what `dump run` reads
DATA = folder_in(
    f"give the folder `{_EXPORT}` wrote",
    if_file="train reads exported hidden states (hs_{i}.safetensors), not prompts: dump them with "
    f"`sglang-eagle3 dump run --data FILE`, export them with `{_EXPORT}`, then pass --data DIR",
)


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """What is trained, from what, for how long."""
    d = _DEFAULTS
    p.add_argument(
        "--data",
        type=DATA,
        help="dir with hs_{i}.safetensors (or DIR/hidden_states/ with them); required but with --dry-run",
    )
    p.add_argument(
        "--target",
        required=True,
        type=folder_in("give the target model's local folder (config.json + safetensors)"),
        help="the target's local HF directory (config + safetensors)",
    )
    p.add_argument(
        "--out",
        type=folder_out("give a new or empty folder, or an earlier output of train"),
        help="where the draft is written (a new or empty directory, or an earlier output of "
        "train with --force or --resume); after every epoch it holds the draft so far and checkpoint/, "
        "what --resume continues from. Required but with --dry-run",
    )
    p.add_argument("--force", action="store_true", help="replace --out when it holds an earlier output of train")
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=d["epochs"],
        help=f"default {DEFAULT_EPOCHS} (or as many as --steps needs)",
    )
    p.add_argument("--steps", type=positive_int, default=d["steps"], help="stop after this many optimizer steps")
    p.add_argument("--lr", type=positive_number, default=d["lr"], help="peak learning rate")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=d["optimizer"], help="speculators optimizer")
    p.add_argument(
        "--scheduler", choices=SCHEDULERS, default=d["scheduler"], help="learning-rate schedule after warm-up"
    )
    p.add_argument("--warmup-steps", type=non_negative_int, default=d["warmup_steps"], help="default: speculators' own")
    p.add_argument("--device", choices=DEVICES, default=d["device"], help="default: cuda when available")
    p.add_argument(
        "--draft-arch",
        choices=tuple(ROUTES),
        default=d["draft_arch"],
        help="llama (default; with --init-from: its layout): speculators' Eagle3 "
        "(LlamaForCausalLMEagle3); mla: SGLang's MLA EAGLE-3 draft for DeepSeek/Kimi targets "
        "(Eagle3DeepseekV2ForCausalLM), trained by this package's own loop; dflash: a block-diffusion draft "
        "(SGLang's DFlashDraftModel), trained by speculators' DFlash trainer",
    )
    p.add_argument(
        "--layer-ids",
        default=d["layer_ids"],
        help="aux HF hidden_states indices, e.g. 1,2,3 (default: DIR metadata, else speculators' default)",
    )
    p.add_argument(
        "--init-from",
        metavar="DIR",
        type=folder_in("give the folder of the draft to continue training"),
        default=d["init_from"],
        help="continue training this draft (SGLang's serving layout or train's output): its weights, "
        "draft-vocab mapping, layout and shape (--draft-arch, --num-layers, --intermediate-size, "
        "--head-dim, --draft-vocab-size, --layer-ids default to its own; a flag saying otherwise is "
        "refused); the epochs and the schedule start afresh",
    )


def _add_draft_flags(p: argparse.ArgumentParser) -> None:
    """The draft's shape and the trainer's settings."""
    d = _DEFAULTS
    p.add_argument(
        "--draft-vocab-size", type=positive_int, default=d["draft_vocab_size"], help="default: the target's full vocab"
    )
    p.add_argument(
        "--num-layers",
        type=positive_int,
        default=d["num_layers"],
        help="draft decoder layers (default 1; with --init-from: its)",
    )
    p.add_argument(
        "--intermediate-size",
        type=positive_int,
        default=d["intermediate_size"],
        help="default: the target's intermediate_size",
    )
    p.add_argument(
        "--head-dim", type=positive_int, default=d["head_dim"], help="default: 128 (64 if 128 does not divide hidden)"
    )
    p.add_argument(
        "--max-position-embeddings",
        type=positive_int,
        default=d["max_position_embeddings"],
        help="default: max(target's, 8192)",
    )
    p.add_argument(
        "--ttt-steps", type=positive_int, default=d["ttt_steps"], help="training-time-test unroll steps (EAGLE-3)"
    )
    p.add_argument(
        "--block-size",
        type=positive_int,
        default=d["block_size"],
        help="dflash: tokens per drafted block, its anchor included (default 16)",
    )
    p.add_argument(
        "--mask-token-id",
        type=non_negative_int,
        default=d["mask_token_id"],
        help="dflash: the token id filling a block's drafted positions, one the target's text never holds "
        "(default: the target tokenizer's mask token)",
    )
    p.add_argument(
        "--max-anchors",
        type=positive_int,
        default=d["max_anchors"],
        help="dflash: blocks drawn per packed sequence (default: speculators' 512)",
    )
    p.add_argument("--total-seq-len", type=positive_int, default=d["total_seq_len"], help="tokens per packed batch")
    p.add_argument(
        "--train-ratio", type=_ratio, default=d["train_ratio"], help="the rest is speculators' validation split"
    )
    p.add_argument("--loss-fn", default=d["loss_fn"], help="speculators loss spec (default: its kl_div)")
    p.add_argument("--loss-impl", choices=LOSS_IMPLS, default=d["loss_impl"], help="GPU only; CPU uses eager")
    p.add_argument("--attn-impl", choices=ATTN_IMPLS, default=d["attn_impl"], help="GPU only; CPU uses sdpa")
    p.add_argument(
        "--num-workers",
        type=non_negative_int,
        default=d["num_workers"],
        help="speculators DataLoader workers (0 = in-process)",
    )
    p.add_argument("--seed", type=non_negative_int, default=d["seed"], help="random seed")
    p.add_argument("--log-every", type=positive_int, default=d["log_every"], help="print metrics every N steps")
    p.add_argument(
        "--min-val-acc",
        type=number_in(0.0, 1.0, include_low=True),
        default=d["min_val_acc"],
        help="exit non-zero when the draft's validation accuracy is at or below this (0 = never)",
    )
    p.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="llama: keep every epoch's checkpoint under OUT/checkpoint/ (default: the last one only)",
    )


def _add_scale_flags(p: argparse.ArgumentParser) -> None:
    """Batching over ranks, resuming, the plan."""
    d = _DEFAULTS
    p.add_argument(
        "--global-batch",
        type=positive_int,
        default=d["global_batch"],
        help="micro-batches per optimizer step over all ranks, a multiple of the ranks (each accumulates "
        "--global-batch / ranks): llama: packed sequences of --total-seq-len tokens; mla: samples "
        "(default: one per rank). The same value trains the same steps on any number of ranks",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run whose output is in --out from its last epoch (model, optimizer, scheduler, "
        "step, data order); nothing there: start afresh",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan without training: parameters, memory per rank (weights, gradients, "
        "optimizer, activations), tokens and time per step, and whether it fits the device",
    )
    p.add_argument(
        "--device-memory-gib",
        type=positive_number,
        default=d["device_memory_gib"],
        help="--dry-run: memory per rank to plan for (default: the CUDA device's, when there is one)",
    )
    p.add_argument(
        "--world-size",
        type=positive_int,
        default=d["world_size"],
        help="--dry-run: ranks to plan for (default: torchrun's WORLD_SIZE, else 1)",
    )


def _add_select_flags(p: argparse.ArgumentParser) -> None:
    """Which epoch's draft OUT keeps (training/selection.py; the score: acceptance/select.py)."""

    p.add_argument(
        "--select-by",
        choices=SELECT_BY,
        default=_DEFAULTS["select_by"],
        help="the epoch whose draft OUT keeps: last, or predicted-accept: the best accept length `eval` "
        "predicts on the held-out split (1 - --train-ratio), scored after every epoch on rank 0 "
        "(checkpoint/ stays the last epoch's)",
    )
    p.add_argument(
        "--select-steps",
        type=positive_int,
        default=None,
        metavar="N",
        help="--select-by predicted-accept: the server's --speculative-num-steps to predict for (default 3)",
    )
    p.add_argument(
        "--select-samples",
        type=positive_int,
        default=None,
        metavar="N",
        help="--select-by predicted-accept: score on at most this many held-out samples (default: all)",
    )


def build_parser() -> argparse.ArgumentParser:

    p = cli_common.parser("train", cli_common.doc_description(__doc__))
    _add_run_flags(p)
    _add_draft_flags(p)
    _add_scale_flags(p)
    _add_select_flags(p)
    cli_common.add_json_out(
        p, "the run's summary (steps, losses, accuracies, where the draft went, each epoch's score and the kept epoch)"
    )
    cli_common.add_verbosity(
        p,
        quiet="of the per-step lines only the first and the last one (the trainer's epoch bar stays)",
        verbose="also show speculators', transformers' and torch's logs, warnings and bars",
    )
    return p


def options_from_args(a: argparse.Namespace) -> TrainOptions:
    """The library's options from the parsed flags (--quiet: only the first and the last step's line)."""
    opts = TrainOptions(
        **{f.name: getattr(a, f.name) for f in dataclasses.fields(TrainOptions) if f.metadata.get("cli", True)}
    )
    if getattr(a, "quiet", False):
        opts.log_every = 10**9  # progress prints the first and the last step whatever the interval
    if opts.select_by == "predicted-accept":
        from ..acceptance.select import epoch_scorer

        opts.epoch_scorer = epoch_scorer(opts, a.select_steps, a.select_samples)
    return opts


def main(argv: list[str] | None = None) -> int:
    import contextlib

    parser = cli_common.finish(build_parser(), "train")
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
        if _rank() == 0:  # whatever the training made of it
            print(interrupted_line("train", what_out_holds(a.out)), file=sys.stderr)
        return cli_common.EXIT_INTERRUPTED
    if a.dry_run:
        from ..training.plan import plan_lines

        if a.json != "-":
            print("\n".join(plan_lines(result)))
    if a.json and _rank() == 0:
        cli_common.write_json(a.json, result)
    return 0


def check_data(data: str) -> None:
    """--data holds hidden-state files (named, not read): a dump not yet exported, or a folder of something
    else, is said now rather than once torch and the trainer are loaded."""
    from pathlib import Path

    from ..dump.config import META_FILE
    from ..training.data import find_hs_dir

    try:
        find_hs_dir(Path(data))
    except TrainDraftError:
        if (Path(data) / META_FILE).is_file():
            raise cli_common.CliError(
                f"--data {data}: a dump, not yet exported: run `sglang-eagle3 dump export --dump-dir {data} "
                f"--to speculators --out DIR`, then pass --data DIR"
            ) from None
        raise cli_common.CliError(
            f"--data {data}: no hs_{{i}}.safetensors files here or in its hidden_states/; give the folder "
            f"`{_EXPORT}` wrote"
        ) from None


def what_out_holds(out: str | None) -> str:
    """A true sentence on --out after an interrupted run: a draft is published there once an epoch completes."""
    from pathlib import Path

    if out and (Path(out) / "config.json").is_file():
        return f"--out {out} holds the draft of the last complete epoch; continue with --resume"
    return f"--out {out} was not written (no epoch completed); run the command again to start over"


def _rank() -> int:
    """This process's rank under torchrun (0 outside it): rank 0 alone writes --json."""

    try:
        env = torchrun_env()
    except TrainDraftError:
        return 0
    return env[0] if env else 0


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("train", main))
