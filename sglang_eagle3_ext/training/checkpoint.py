"""The output folder of a run as it goes: after every epoch rank 0 writes --out whole through outdir.py
(built beside it, swapped in), holding the draft as of that epoch (or the best-scored one so far with
--select-by: training/selection.py) and, in `checkpoint/`, what the run resumes from (the model in float32,
the optimizer, the scheduler, the epoch and step, how the data was ordered).
A run that stops (a crash, a lost node) leaves the last complete epoch in --out; `--resume` continues from
it, to the same result as a run that never stopped (the data order is a function of the seed, the epoch and
the global batch: training/sharding.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import envs, outdir
from ..boundary import BadInput, field, read_json_file
from ..json_file import write_json
from ..outdir import read_marker
from .distributed import World, barrier, on_main
from .report import TrainDraftError, say

CKPT_DIR = "checkpoint"
STATE = "state.json"
STATE_VERSION = 1
# what must be the same for a resumed run to continue the same data order and optimizer (name -> flag)
IDENTITY = {
    "arch": "--draft-arch",
    "seed": "--seed",
    "global_batch": "--global-batch",
    "n_train": "--data (its sample count)",
    "total_seq_len": "--total-seq-len",
    "layer_ids": "--layer-ids",
    "optimizer": "--optimizer",
    "train_ratio": "--train-ratio",
    # the draft's shape (recorded since these keys were added; the model file's header is compared either way)
    "num_layers": "--num-layers",
    "intermediate_size": "--intermediate-size",
    "head_dim": "--head-dim",
    "draft_vocab_size": "--draft-vocab-size",
    "ttt_steps": "--ttt-steps",
    "block_size": "--block-size",
    "mask_token_id": "--mask-token-id",
}
# what every checkpoint of the route records (the keys IDENTITY gained later may be missing from older ones)
RECORDED = {"arch", "seed", "global_batch", "n_train", "layer_ids", "train_ratio"}


class TrainingStopped(TrainDraftError):
    """Raised after the checkpoint of the epoch SGLANG_EAGLE3_EXT_TRAIN_STOP_AFTER_EPOCHS names."""


class Publisher:
    """Writes --out once per epoch (rank 0; the other ranks wait for it)."""

    def __init__(self, out, rule: dict, record: dict, world: World, keep=None):
        self.out, self.rule, self.record, self.world = Path(out), dict(rule), record, world
        self.count = 0
        self.keep = keep  # selection.Keeper: which epoch's draft --out holds (None: the last)

    def publish(self, build: Callable[[Path], None]) -> None:
        """build(tmp) fills the new output; it replaces --out when complete."""

        def write():
            # after the first write --out holds this run's own output, which the next one replaces
            rule = dict(self.rule, replace=self.rule.get("replace") or self.count > 0)
            with outdir.writing(self.out, **rule, record=self.record) as tmp:
                build(tmp)
                if self.keep is not None:
                    self.keep.choose(tmp, self.out, tmp / CKPT_DIR / STATE)

        on_main(write, self.world)
        self.count += 1
        barrier(self.world)


def write_state(ckpt: Path, state: dict) -> None:
    write_json(ckpt / STATE, {"version": STATE_VERSION, **state})


def read_resume_point(out, resume: bool) -> dict | None:
    """The state to resume from in --out (None: start afresh, said once). TrainDraftError when --out holds an
    output of train that cannot be resumed, naming why."""

    out = Path(out)
    if not resume:
        return None
    if not out.is_dir() or not any(out.iterdir()):
        say(f"--resume: nothing in {out} to resume from: starting afresh")
        return None
    try:
        marker = read_marker(out)
        if marker is None or marker.get("tool") != "train":
            raise TrainDraftError(
                f"--resume: {out} is not an output of train (no train marker): nothing to resume; "
                f"choose the --out of the run to continue"
            )
        p = out / CKPT_DIR / STATE
        if not p.exists():
            raise TrainDraftError(
                f"--resume: {out} holds a draft but no {CKPT_DIR}/{STATE} (written by a train "
                f"without checkpoints): train it again with --force instead"
            )
        state = read_json_file(p, "training checkpoint state")
        where = str(p)
        field(state, "version", int, where, choices=(STATE_VERSION,))
        field(state, "epochs_done", int, where, minimum=1)
        field(state, "global_step", int, where, minimum=0)
        field(state, "identity", dict, where)
        field(state, "files", list, where)
        from .resume import check_history

        check_history(state, where)  # the rows' values, null read back as NaN
        if state.get("selection") is not None:  # which epoch's draft --out holds (training/selection.py)
            from .selection import read_record

            read_record(state["selection"], state["epochs_done"], f"{where}: selection")
    except BadInput as e:
        raise TrainDraftError(f"--resume: {e}; train afresh with --force") from None
    for name in state["files"]:
        parts = name.split("/") if isinstance(name, str) else [""]
        if any(p in ("", ".", "..") for p in parts) or not (out / CKPT_DIR / name).is_file():
            raise TrainDraftError(
                f"--resume: {out / CKPT_DIR} lacks {name!r}, which its {STATE} lists: the "
                f"checkpoint is incomplete; train afresh with --force"
            )
    return state


def check_identity(state: dict | None, identity: dict, out=None) -> None:
    """Refuse a resume whose settings would not continue the same run (the file named when `out` is given)."""
    if state is None:
        return
    old = state["identity"]
    where = f" ({Path(out) / CKPT_DIR / STATE})" if out is not None else ""
    lacking = sorted(k for k in RECORDED & set(identity) if k not in old)
    if lacking:
        raise TrainDraftError(
            f"--resume: the checkpoint{where} records no {lacking[0]!r} in its 'identity': not a checkpoint "
            f"train wrote; train afresh with --force"
        )
    for k, flag in IDENTITY.items():
        if k in identity and k in old and old[k] != identity[k]:
            raise TrainDraftError(
                f"--resume: {flag} is {identity[k]!r} but the checkpoint was trained with "
                f"{old[k]!r}{where}; resume with the same setting, or train afresh with --force"
            )


def maybe_stop(epochs_done: int, epochs: int) -> None:
    """The testing aid SGLANG_EAGLE3_EXT_TRAIN_STOP_AFTER_EPOCHS: stop as if interrupted (--out is complete)."""

    n = envs.get(envs.TRAIN_STOP_AFTER_EPOCHS)
    if n is not None and epochs_done >= n and epochs_done < epochs:
        raise TrainingStopped(
            f"stopped after epoch {epochs_done} of {epochs} ({envs.TRAIN_STOP_AFTER_EPOCHS}="
            f"{n}); continue with --resume"
        )
