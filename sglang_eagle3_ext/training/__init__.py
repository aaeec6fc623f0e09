"""Draft training from hidden-state files: `train_draft(TrainOptions(data=..., target=..., out=...))`.

- `train` — the entry; `routes` — the route of each draft layout (`ROUTES`: the folder its ROUTE names; each
  route folder's `train.py` runs it, its `plan.py` sizes it);
- `options` — `TrainOptions` (what one run is asked to do) and how it writes its output folder;
- `train_flags` — the fields `TrainOptions` inherits, each a flag of `train` declared once (`build`'s too);
- `distributed`, `sharding`, `checkpoint` — one process or one per rank under torchrun; which samples each rank
  trains on per step; --out written after every epoch and `--resume`;
- `resume` — the checkpoint in --out compared with the run before `--resume` loads anything (its headers, states,
  steps, history), refused by name when it does not fit;
- `init_from` — `--init-from DIR`: continue from an existing draft's weights, vocabulary mapping and shape;
- `selection` — which epoch's draft --out keeps (`--select-by`: the last, or the best by a per-epoch score);
- `speculators/` (`train`, `plan`, `run`, `trainer`, `patches`, `progress`) — the Llama layout's route, trained by
  speculators' own trainer (FSDP over ranks);
- `mla/` (`train`, `plan`, `loop`, `step`; the module is draft/arch/mla/net.py) — SGLang's MLA layout's route (Kimi-K2.x),
  trained by our own loop (DDP);
- `dflash/` (`train`, `plan`, `config`) — the DFlash layout's route (block diffusion), speculators' DFlash model run on the
  Llama route's machinery;
- `data`, `samples`, `loader`, `target_view` — the hidden-state files, each checked before training and
  streamed by a worker pool, and the target;
- `plan` (+ `plan_models`: what the routes' plan steps share) — `--dry-run`: sizes, memory per rank and time, in
  arithmetic, without training;
- `report` — `TrainDraftError`, the progress lines, the verdicts on a finished draft.
"""

from .options import TrainOptions
from .report import TrainDraftError
from .train import ROUTES, train_draft

__all__ = ["ROUTES", "TrainDraftError", "TrainOptions", "train_draft"]
