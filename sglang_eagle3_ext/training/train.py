"""Train an EAGLE-3 draft from hidden-state files: `train_draft(TrainOptions(...))`, the one entry of the
library (the `train` command line calls it).

Each draft layout names the route that trains it (draft/arch: ROUTE, training/routes.py): the Llama layout is
trained by speculators' own trainer (training/speculators/train.py), SGLang's MLA layout by ours
(training/mla/train.py)."""

from __future__ import annotations

from typing import Callable

from .. import outdir
from .._log import log_once
from ..draft import arch as layouts
from . import distributed
from .options import TrainOptions
from .report import TrainDraftError
from .routes import ROUTES, train_entry


def route(draft_arch: str) -> Callable[[TrainOptions, dict], dict]:
    if draft_arch not in ROUTES:
        raise TrainDraftError(f"--draft-arch {draft_arch!r}: expected one of {', '.join(ROUTES)}")
    return train_entry(layouts.get(draft_arch))


def resolve_device(device: str | None) -> str:
    """--device, or cuda when torch sees a CUDA device (said once)."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        log_once(
            "train-device",
            "training on %s (no --device: %s)",
            device,
            "torch sees a CUDA device" if device == "cuda" else "torch sees no CUDA device",
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainDraftError("--device cuda but torch sees no CUDA device")
    return device


def train_draft(options: TrainOptions) -> dict:
    """Train the draft `options` describes into `options.out`; returns the run's summary (steps, losses,
    accuracies, where the draft went), or with `options.dry_run` the plan (training/plan.py) without training.
    Under torchrun every rank calls this (training/distributed.py): rank 0 writes `out` and prints progress.
    Refusals are TrainDraftError (or outdir's OutputDirRefused for `out`), each naming the input and the
    fix; a draft whose validation accuracy is <= options.min_val_acc is kept in `out` and reported as a
    TrainDraftError."""

    options.check()
    if options.init_from is not None:  # the layout and shape are the draft's (read before any plan or route)
        from .init_from import resolve_options

        options = resolve_options(options)
    options = options.with_defaults()
    if options.dry_run:
        from .plan import plan_draft

        return plan_draft(options)
    train = route(options.draft_arch)
    rule = options.output_rule()
    with distributed.session(resolve_device(options.device)) as world:
        distributed.on_main(lambda: outdir.check(options.out, **rule), world)  # before anything is read or written
        return train(options, rule)
