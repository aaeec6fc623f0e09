"""The accept side, offline: eval's simulation of the user's dump at 8 steps gives the accept length of every
steps count 1..8 (acceptance/by_steps.py); topk 1 only."""

from __future__ import annotations

from ..acceptance.evaluate import EvalOptions, evaluate

MAX_STEPS = 8


def accept_lengths(
    draft: str,
    data: str,
    target: str,
    heldout_fraction: float,
    samples: int | None,
    device: str | None,
    say=None,
    dry_run: bool = False,
) -> dict:

    o = EvalOptions(
        draft=draft,
        data=data,
        target=target,
        steps=MAX_STEPS,
        heldout_fraction=heldout_fraction,
        samples=samples,
        device=device,
        dry_run=dry_run,
    )
    if dry_run:
        return evaluate(o)  # every local input checked; nothing loaded
    from ..acceptance.by_steps import accept_by_steps

    return accept_by_steps(o, MAX_STEPS, say)
