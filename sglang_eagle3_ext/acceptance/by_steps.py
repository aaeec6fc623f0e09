"""The accept length of every `--speculative-num-steps` 1..N from ONE simulation at N steps (topk 1).

A topk-1 draft's step k does not depend on how many steps follow it, so the chain simulated at N steps holds
every shorter chain: at n steps an anchor accepts min(accepted, n) drafts of min(known, n) judged ones. A draft
proposing a block (DFlash: steps = block size - 1) is simulated at each n, since every proposal depends on the
block's size. Each n gets its own greedy server walk (rounds advance by that n's accepted drafts + 1), so every
figure is the one `eval --steps n` reports. Trees (topk > 1) are not simulated (evaluate.settings_problem says so).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..boundary import Refused
from . import drafts
from .block import drafts_block
from .evaluate import local_inputs, resolve_device, settings_problem, simulate_batch, token_batches
from .stats import Tally, Walk

MAX_STEPS = 8


class _Fan:
    """Feeds one simulation's per-anchor results to a Tally and a Walk per steps count, clamped to it."""

    def __init__(self, steps: int):
        self.every = {n: Tally(n) for n in range(1, steps + 1)}
        self.walks = {n: Walk(n) for n in range(1, steps + 1)}

    def add_many(self, accepted, known) -> None:
        accepted, known = np.asarray(accepted), np.asarray(known)
        for n, t in self.every.items():
            t.add_many(np.minimum(accepted, n), np.minimum(known, n))

    def add(self, accepted, known, mask) -> None:
        accepted, known = np.asarray(accepted), np.asarray(known)
        for n, w in self.walks.items():
            w.add(np.minimum(accepted, n), np.minimum(known, n), mask)


def accept_by_steps(o, max_steps: int = MAX_STEPS, say=None) -> dict:
    """eval's Options `o` (its steps ignored) -> {"by_steps": {n: accept length as SGLang reports it},
    "per_request": {n: ...}, "positions": P(draft k | < k) over every anchor at max_steps, ...}."""
    import time

    import torch

    problem = settings_problem(max_steps, o.topk, None)
    if problem:
        raise Refused(problem)
    o = dataclasses.replace(o, steps=max_steps, draft_tokens=None, url=None)
    spec, source, target, _, idx, rule, _ = local_inputs(o)
    device = resolve_device(o.device)
    dtype = torch.bfloat16 if o.dtype == "bf16" else torch.float32
    loaded = drafts.load(o.draft, target, device, dtype)
    max_len = loaded.max_len
    notes: list = list(loaded.notes)
    fan, t0, done = _Fan(max_steps), time.perf_counter(), 0
    for batch in token_batches(source, idx, loaded, o.batch_tokens, max_len, notes):
        if drafts_block(loaded.model):  # a block's proposals depend on its size: one simulation per steps count
            for n in range(1, max_steps + 1):
                simulate_batch(loaded, batch, n, device, dtype, fan.every[n], fan.walks[n])
        else:
            simulate_batch(loaded, batch, max_steps, device, dtype, fan, fan)
        done += len(batch)
        if say:
            say(f"simulated {done}/{len(idx)} held-out samples at {max_steps} steps")
    if not fan.every[1].units:
        raise Refused(
            f"--data {o.data}: the {len(idx)} held-out samples hold no anchor (no position with a next "
            f"token inside the response region); give a dump with responses"
        )
    return {
        "by_steps": {n: w.as_sglang_reports() for n, w in fan.walks.items()},
        "per_request": {n: w.per_request() for n, w in fan.walks.items()},
        "every_anchor": {n: t.accept_length() for n, t in fan.every.items()},
        "positions": [p["p"] for p in fan.every[max_steps].positions()],
        "rounds": {n: w.rounds for n, w in fan.walks.items()},
        "samples": len(idx),
        "heldout_rule": rule,
        "seconds": round(time.perf_counter() - t0, 3),
        "notes": notes,
        "topk": 1,
        "trees": "topk > 1 draft trees are not simulated: every figure is for --speculative-eagle-topk 1",
    }
