"""Draft training from hidden-state files: `train_draft(TrainOptions(data=..., target=..., out=...))`.

- `train` — the entry and the registry of routes, one per draft layout (`ROUTES`);
- `options` — `TrainOptions` (what one run is asked to do) and how it writes its output folder;
- `speculators_train` (+ `speculators_run`, `speculators_patches`, `progress`) — the Llama layout, trained by
  speculators' own trainer;
- `mla_train` (+ `mla_draft`) — SGLang's MLA layout (Kimi-K2.x), trained by our own loop;
- `data`, `samples`, `target_view` — the hidden-state files, each checked before training, and the target;
- `report` — `TrainDraftError`, the progress lines, the verdicts on a finished draft.
"""
from .options import TrainOptions
from .report import TrainDraftError
from .train import ROUTES, train_draft

__all__ = ["ROUTES", "TrainDraftError", "TrainOptions", "train_draft"]
