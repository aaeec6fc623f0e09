"""The changes the Llama route (training/speculators/train.py) makes to third-party code for the duration of one
training run (outside sglang_eagle3_ext.patch_table, which patches SGLang only); `applied(...)` undoes them on
exit, even on error.

* ``speculators.train.cli.Trainer`` -> a subclass (training/speculators/trainer.py: our batches, step loop with
  gradient accumulation, checkpoints, and --out written after each epoch).
* ``speculators.train.cli.maybe_setup_distributed`` / ``maybe_destroy_distributed``: the process group is ours
  (training/distributed.py: gloo on CPU, which speculators' own setup refuses, nccl on CUDA), joined before
  speculators runs; speculators' topology state is pointed at it (one data-parallel group of all ranks) and
  reset after, without leaving the group, which outlives speculators' main.
* ``speculators.train.trainer.tqdm``: its bars count epochs from 1, as our lines do (training/speculators/progress.py).
* ``torch.accelerator.synchronize`` -> a no-op on a CPU-only torch (speculators' step timer calls it and
  it raises there). Nothing changes on CUDA.
"""

from __future__ import annotations

import contextlib
import logging

from .trainer import make_trainer_class


def _adopt(world):
    """speculators' distributed state for our process group (its getters read these module variables)."""
    import speculators.train.distributed as sd

    def setup(sp_size: int = 1) -> None:
        if not world.distributed:
            return
        sd._local_rank, sd._rank, sd._world_size, sd._is_distributed = (world.local_rank, world.rank, world.size, True)
        sd._init_sp_process_groups(world.rank, world.size, sp_size)

    def destroy() -> None:
        sd._local_rank, sd._rank, sd._world_size, sd._is_distributed = 0, 0, 1, False
        sd._sp_size, sd._sp_rank, sd._dp_size, sd._dp_rank = 1, 0, 1, 0
        sd._sp_group = sd._dp_group = None

    return setup, destroy


@contextlib.contextmanager
def applied(spec_cli, ctx):
    """speculators' cli module with our Trainer and process group swapped in (and synchronize a no-op without an
    accelerator); `ctx`: the run (speculators/run.RunContext)."""
    import speculators.train.trainer as spec_trainer
    import torch

    from .progress import bar_counting_from_one

    trainer_cls = make_trainer_class(spec_cli.Trainer, ctx)
    setup, destroy = _adopt(ctx.world)
    saved = (
        spec_cli.Trainer,
        spec_cli.maybe_setup_distributed,
        spec_cli.maybe_destroy_distributed,
        torch.accelerator.synchronize,
        spec_trainer.tqdm,
    )
    spec_cli.Trainer, spec_cli.maybe_setup_distributed, spec_cli.maybe_destroy_distributed = trainer_cls, setup, destroy
    spec_trainer.tqdm = bar_counting_from_one(spec_trainer.tqdm)
    if torch.accelerator.current_accelerator() is None:
        torch.accelerator.synchronize = lambda *args, **kw: None
    try:
        yield
    finally:
        destroy()
        (
            spec_cli.Trainer,
            spec_cli.maybe_setup_distributed,
            spec_cli.maybe_destroy_distributed,
            torch.accelerator.synchronize,
            spec_trainer.tqdm,
        ) = saved
        logging.getLogger("speculators.metrics").removeHandler(ctx.progress)
