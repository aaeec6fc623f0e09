"""Every flag of `train`, declared once (`options.schema.flag`) on the fields `TrainOptions` (options.py) inherits:
`cli/train.py` derives its parser from them, `build` its train group and the keys of `--config`.

The fields are in the order of `train --help`; `ScoreOptions` holds the settings of the predicted-accept score,
which the train and build commands make (acceptance/select.scored), so they are no setting of the library's run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..options import values
from ..options.schema import flag
from .routes import ROUTES
from .selection import SELECT_BY

DEFAULT_EPOCHS = 10
OPTIMIZERS = ("muon", "adamw")
SCHEDULERS = ("linear", "cosine", "none")
DEVICES = ("cuda", "cpu")
LOSS_IMPLS = ("fused", "eager")
ATTN_IMPLS = ("simple_flex_attention", "sdpa", "eager")

EXPORT = "sglang-eagle3 dump export --dump-dir DUMP --to speculators --out DIR"
# train reads exported hidden states; a prompts file is the mix-up to name: it is what `dump run` reads
DATA = values.folder_in(
    f"give the folder `{EXPORT}` wrote",
    if_file="train reads exported hidden states (hs_{i}.safetensors), not prompts: dump them with "
    f"`sglang-eagle3 dump run --data FILE`, export them with `{EXPORT}`, then pass --data DIR",
)
_positive_number, _ratio = values.number_in(0.0, float("inf")), values.number_in(0.0, 1.0)


@dataclasses.dataclass
class RunFlags:
    """What is trained, from what, for how long."""

    # hs_{i}.safetensors (or DATA/hidden_states/ with them)
    data: str | Path = flag(
        type=DATA, help="dir with hs_{i}.safetensors (or DIR/hidden_states/ with them); required but with --dry-run"
    )
    target: str | Path = flag(
        required=True,
        type=values.folder_in("give the target model's local folder (config.json + safetensors)"),
        help="the target's local HF directory (config + safetensors)",
    )
    # a new or empty folder, or an earlier output of train with force
    out: str | Path = flag(
        type=values.folder_out("give a new or empty folder, or an earlier output of train"),
        help="where the draft is written (a new or empty directory, or an earlier output of "
        "train with --force or --resume); after every epoch it holds the draft so far and checkpoint/, "
        "what --resume continues from. Required but with --dry-run",
    )
    force: bool = flag(False, action="store_true", help="replace --out when it holds an earlier output of train")
    # None: DEFAULT_EPOCHS, or as many as steps needs
    epochs: int | None = flag(
        None, type=values.positive_int, help=f"default {DEFAULT_EPOCHS} (or as many as --steps needs)"
    )
    steps: int | None = flag(None, type=values.positive_int, help="stop after this many optimizer steps")
    lr: float = flag(1e-3, type=_positive_number, help="peak learning rate")
    optimizer: str = flag("adamw", choices=OPTIMIZERS, help="speculators optimizer")
    scheduler: str = flag("cosine", choices=SCHEDULERS, help="learning-rate schedule after warm-up")
    warmup_steps: int | None = flag(None, type=values.non_negative_int, help="default: speculators' own")
    device: str | None = flag(None, choices=DEVICES, help="default: cuda when available")
    # a key of training.train.ROUTES; None: --init-from's layout, else llama
    draft_arch: str | None = flag(
        None,
        choices=tuple(ROUTES),
        help="llama (default; with --init-from: its layout): speculators' Eagle3 "
        "(LlamaForCausalLMEagle3); mla: SGLang's MLA EAGLE-3 draft for DeepSeek/Kimi targets "
        "(Eagle3DeepseekV2ForCausalLM), trained by this package's own loop; dflash: a block-diffusion draft "
        "(SGLang's DFlashDraftModel), trained by speculators' DFlash trainer",
    )
    # "1,2,3" or [1, 2, 3]; None: the data's metadata, else default
    layer_ids: str | list[int] | None = flag(
        None, help="aux HF hidden_states indices, e.g. 1,2,3 (default: DIR metadata, else speculators' default)"
    )
    # a draft (either layout) whose weights this run continues from
    init_from: str | Path | None = flag(
        None,
        metavar="DIR",
        type=values.folder_in("give the folder of the draft to continue training"),
        help="continue training this draft (SGLang's serving layout or train's output): its weights, "
        "draft-vocab mapping, layout and shape (--draft-arch, --num-layers, --intermediate-size, "
        "--head-dim, --draft-vocab-size, --layer-ids default to its own; a flag saying otherwise is "
        "refused); the epochs and the schedule start afresh",
    )


@dataclasses.dataclass
class DraftFlags(RunFlags):
    """The draft's shape and the trainer's settings."""

    # None: the target's full vocabulary
    draft_vocab_size: int | None = flag(None, type=values.positive_int, help="default: the target's full vocab")
    # None: --init-from's, else 1
    num_layers: int | None = flag(
        None, type=values.positive_int, help="draft decoder layers (default 1; with --init-from: its)"
    )
    intermediate_size: int | None = flag(None, type=values.positive_int, help="default: the target's intermediate_size")
    head_dim: int | None = flag(None, type=values.positive_int, help="default: 128 (64 if 128 does not divide hidden)")
    max_position_embeddings: int | None = flag(None, type=values.positive_int, help="default: max(target's, 8192)")
    ttt_steps: int = flag(3, type=values.positive_int, help="training-time-test unroll steps (EAGLE-3)")
    # dflash: tokens per drafted block, the anchor included; None: 16
    block_size: int | None = flag(
        None, type=values.positive_int, help="dflash: tokens per drafted block, its anchor included (default 16)"
    )
    # dflash: the blocks' noise token; None: the target tokenizer's
    mask_token_id: int | None = flag(
        None,
        type=values.non_negative_int,
        help="dflash: the token id filling a block's drafted positions, one the target's text never holds "
        "(default: the target tokenizer's mask token)",
    )
    # dflash: blocks drawn per packed sequence; None: speculators' 512
    max_anchors: int | None = flag(
        None, type=values.positive_int, help="dflash: blocks drawn per packed sequence (default: speculators' 512)"
    )
    total_seq_len: int = flag(8192, type=values.positive_int, help="tokens per packed batch")
    train_ratio: float = flag(0.95, type=_ratio, help="the rest is speculators' validation split")
    loss_fn: str | None = flag(None, help="speculators loss spec (default: its kl_div)")
    loss_impl: str = flag("fused", choices=LOSS_IMPLS, help="GPU only; CPU uses eager")
    attn_impl: str = flag("simple_flex_attention", choices=ATTN_IMPLS, help="GPU only; CPU uses sdpa")
    num_workers: int = flag(4, type=values.non_negative_int, help="speculators DataLoader workers (0 = in-process)")
    seed: int = flag(0, type=values.non_negative_int, help="random seed")
    log_every: int = flag(10, type=values.positive_int, help="print metrics every N steps")
    # <= this validation accuracy fails the run (0: never)
    min_val_acc: float = flag(
        0.05,
        type=values.number_in(0.0, 1.0, include_low=True),
        help="exit non-zero when the draft's validation accuracy is at or below this (0 = never)",
    )
    keep_checkpoints: bool = flag(
        False,
        action="store_true",
        help="llama: keep every epoch's checkpoint under OUT/checkpoint/ (default: the last one only)",
    )


@dataclasses.dataclass
class TrainFlags(DraftFlags):
    """Batching over ranks, resuming, the plan, and which epoch's draft OUT keeps (training/selection.py)."""

    # micro-batches per optimizer step over all ranks; None: one per rank
    global_batch: int | None = flag(
        None,
        type=values.positive_int,
        help="micro-batches per optimizer step over all ranks, a multiple of the ranks (each accumulates "
        "--global-batch / ranks): llama: packed sequences of --total-seq-len tokens; mla: samples "
        "(default: one per rank). The same value trains the same steps on any number of ranks",
    )
    # continue from the checkpoint in `out` (nothing there: start afresh)
    resume: bool = flag(
        False,
        action="store_true",
        help="continue the run whose output is in --out from its last epoch (model, optimizer, scheduler, "
        "step, data order); nothing there: start afresh",
    )
    # return the plan (sizes, memory per rank) without training
    dry_run: bool = flag(
        False,
        action="store_true",
        help="print the plan without training: parameters, memory per rank (weights, gradients, "
        "optimizer, activations), tokens and time per step, and whether it fits the device",
    )
    # the plan's memory budget per rank; None: the device's own
    device_memory_gib: float | None = flag(
        None,
        type=_positive_number,
        help="--dry-run: memory per rank to plan for (default: the CUDA device's, when there is one)",
    )
    # the plan's ranks; None: torchrun's WORLD_SIZE, else 1
    world_size: int | None = flag(
        None, type=values.positive_int, help="--dry-run: ranks to plan for (default: torchrun's WORLD_SIZE, else 1)"
    )
    # the epoch whose draft `out` keeps: "last", or "predicted-accept": the best by epoch_scorer
    select_by: str = flag(
        "last",
        choices=SELECT_BY,
        help="the epoch whose draft OUT keeps: last, or predicted-accept: the best accept length `eval` "
        "predicts on the held-out split (1 - --train-ratio), scored after every epoch on rank 0 "
        "(checkpoint/ stays the last epoch's)",
    )


@dataclasses.dataclass(kw_only=True)
class ScoreOptions:
    """The predicted-accept score of each epoch (`--select-by predicted-accept`): what the commands'
    `acceptance.select.scored(options, steps, samples)` makes it with."""

    select_steps: int | None = flag(
        None,
        type=values.positive_int,
        metavar="N",
        help="--select-by predicted-accept: the server's --speculative-num-steps to predict for (default 3)",
    )
    select_samples: int | None = flag(
        None,
        type=values.positive_int,
        metavar="N",
        help="--select-by predicted-accept: score on at most this many held-out samples (default: all)",
    )
