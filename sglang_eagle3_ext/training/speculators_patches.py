"""The two changes train_draft.py makes to third-party code for the duration of one training run (outside
sglang_eagle3_ext.patch_table, which patches SGLang only); `applied(...)` undoes both on exit, even on error.

* ``speculators.train.cli.Trainer`` -> a subclass (`make_trainer_class`): places the model on ``cpu`` on a
  CPU run (stock ``model.to(local_rank)`` means an accelerator), maps ``--steps`` onto whole epochs, saves
  per-epoch checkpoints only after the first and last epoch, reports progress, and saves the final model
  to OUT with a bf16 state dict the way speculators' own checkpointer does (never a non-finite one).
* ``torch.accelerator.synchronize`` -> a no-op on a CPU-only torch (speculators' step timer calls it and
  it raises there). Nothing changes on CUDA.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path

from .data import TrainDraftError, _say
from .progress import _Progress


@contextlib.contextmanager
def applied(spec_cli, *, device: str, out: Path, steps: int | None, epochs_given: bool, keep_checkpoints: bool,
            progress: _Progress, result: dict):
    """speculators' cli module with our Trainer swapped in (and synchronize a no-op without an accelerator)."""
    import torch

    trainer_cls = make_trainer_class(spec_cli.Trainer, device=device, out=out, steps=steps,
                                     epochs_given=epochs_given, keep_checkpoints=keep_checkpoints,
                                     progress=progress, result=result)
    orig, orig_sync = spec_cli.Trainer, torch.accelerator.synchronize
    spec_cli.Trainer = trainer_cls
    if torch.accelerator.current_accelerator() is None:
        torch.accelerator.synchronize = lambda *args, **kw: None
    try:
        yield
    finally:
        spec_cli.Trainer = orig
        torch.accelerator.synchronize = orig_sync
        logging.getLogger("speculators.metrics").removeHandler(progress)


def make_trainer_class(base, *, device: str, out: Path, steps: int | None, epochs_given: bool,
                        keep_checkpoints: bool, progress: _Progress, result: dict):
    import torch

    class DraftTrainer(base):
        def __init__(self, model, config, train_loader, val_loader=None):
            n = len(train_loader)
            if n == 0:
                raise TrainDraftError("the training split has no batches")
            if steps is not None:
                need = math.ceil(steps / n)
                config = config._replace(num_epochs=min(config.num_epochs, need) if epochs_given else need)
            if not keep_checkpoints:
                # stock saves model+optimizer every epoch; with freq = epochs it saves after the first and last
                config = config._replace(checkpoint_freq=float(config.num_epochs))
            result["steps_per_epoch"] = n
            result["epochs"] = config.num_epochs
            progress.total = steps if steps is not None else config.num_epochs * n
            _say(f"{n} batches/epoch, {config.num_epochs} epoch(s), {progress.total} steps")
            logging.getLogger("speculators.metrics").addHandler(progress)
            super().__init__(model, config, train_loader, val_loader)

        def setup_model(self):
            # stock code: model.to(local_rank) with local_rank an int, i.e. an accelerator
            self.local_rank = torch.device(device) if device == "cpu" else self.local_rank
            super().setup_model()

        def run_training(self):
            t0 = time.perf_counter()
            super().run_training()
            result["train_seconds"] = time.perf_counter() - t0
            from speculators.train.checkpointer import convert_float_dtype, patch_config_dtype

            from .mla_train import non_finite

            sd = convert_float_dtype(self.model.state_dict(), torch.bfloat16)
            bad = non_finite(sd)
            if bad:
                raise TrainDraftError(f"the trained draft's weights are not finite ({', '.join(bad[:3])}"
                                      f"{', ...' if len(bad) > 3 else ''}): training diverged; nothing saved; "
                                      f"lower --lr")
            out.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(out, state_dict=sd)
            patch_config_dtype(out / "config.json", torch.bfloat16)
            result["saved"] = str(out)

    return DraftTrainer
