"""How a training run reports, whichever route trains it: its one error class, its progress lines, and the
two refusals of a finished draft (one that did not learn, one whose weights are not finite)."""

from __future__ import annotations

from pathlib import Path


class TrainDraftError(RuntimeError):
    """A refusal whose message names the input and the fix (the train command exits 2 with it)."""

    exit_code = 2


class NotLearned(TrainDraftError):
    """The run finished and its draft did not learn: a negative verdict (exit 1), not bad input."""

    exit_code = 1


_quiet = False


def set_quiet(quiet: bool) -> None:
    """Progress lines off (the ranks of a distributed run other than rank 0 train quietly)."""
    global _quiet
    _quiet = quiet


def say(msg: str) -> None:
    if not _quiet:
        print(f"[train_draft] {msg}", flush=True)


def require_learned(val_acc: float | None, min_acc: float, out: Path) -> None:
    """Fail the run when the draft's validation accuracy (first speculative step) is <= min_acc: a draft that
    did not learn otherwise shows up only later, as an accept length of ~1 when served."""
    if min_acc <= 0 or val_acc is None or val_acc != val_acc:  # disabled, or no validation split (NaN)
        return
    if val_acc <= min_acc:
        raise NotLearned(
            f"the trained draft's validation accuracy is {val_acc:.4f} (<= --min-val-acc "
            f"{min_acc}): it did not learn and would serve at an accept length of ~1; "
            f"checkpoint kept in {out}; train longer / with another --lr, or check the data"
        )


def non_finite(state_dict: dict) -> list[str]:
    """Names of the floating tensors holding NaN/Inf (a diverged run; never saved as a draft)."""
    import torch

    return [k for k, v in state_dict.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]


def what_out_holds(out: str | None) -> str:
    """A true sentence on --out after an interrupted run: a draft is published there once an epoch completes."""
    if out and (Path(out) / "config.json").is_file():
        return f"--out {out} holds the draft of the last complete epoch; continue with --resume"
    return f"--out {out} was not written (no epoch completed); run the command again to start over"
