"""A `--speculative-adaptive-config` fitted to the user's acceptance and the measured costs.

SGLang (0.5.14+, adaptive_spec_params.py) keeps one slot per batch-size key of the config (integer strings;
a batch is padded to its CUDA-graph size, then served by the largest key not above it, the smallest key below
that), each with `candidate_steps` and its hysteresis; top-level keys that are not integers are defaults every
slot inherits. A slot starts at the server's --speculative-num-steps when that is a candidate (else the middle
candidate), keeps an EMA of the accepted drafts per request, and every `update_interval` verifies moves down
while EMA <= prev - 0.5 + down_hysteresis (prev 0: 0.5 + down_hysteresis), else up while
EMA > current - 0.5 + up_hysteresis; a slot at 0 steps probes the next candidate.

`settle` replays that rule (EMA, warm-up, update interval) with the mean accepted drafts eval predicts per steps
count, so a config is chosen that settles where the cost model puts each band's best; the unit tests hold
it to SGLang's own AdaptiveStepSlot.
"""

from __future__ import annotations

import json
from pathlib import Path

HYSTERESIS_GRID = (0.0, -0.25, 0.25, -0.5, 0.5, -1.0, 1.0)
NEAR_BEST = 0.03  # neighbours within 3 % of a band's best predicted tokens/s stay candidates


def settle(
    candidates: list[int],
    accept: dict[int, float],
    initial: int,
    up: float = 0.0,
    down: float = -0.25,
    batches: int = 600,
    ema_alpha: float = 0.2,
    update_interval: int = 5,
    warmup: int = 10,
) -> list[int]:
    """The steps a slot serves in its last 100 of `batches` verifies (a cycle: every steps count in it), each
    verify accepting the mean drafts eval predicts at the current steps count (accept[s] - 1)."""
    cand = sorted(set(candidates))
    cur = initial if initial in cand else cand[len(cand) // 2]
    ema, seen = float(cur - 1), []
    for n in range(1, batches + 1):
        if cur > 0:
            ema = (1 - ema_alpha) * ema + ema_alpha * (accept.get(cur, 1.0) - 1.0)
        if n > warmup and (n - warmup) % update_interval == 0:
            cur, ema = _recompute(cand, cur, ema, up, down)
        seen.append(cur)
    return sorted(set(seen[-100:]))


def _recompute(cand: list[int], cur: int, ema: float, up: float, down: float) -> tuple[int, float]:
    i = cand.index(cur)
    if cur == 0:
        i = min(i + 1, len(cand) - 1)
        if cand[i] > 0 and ema < 0:
            ema = float(cand[i] - 1)
        return cand[i], ema
    start = i
    while i > 0 and ema <= (0.5 if cand[i - 1] == 0 else cand[i - 1] - 0.5) + down:
        i -= 1
    if i == start:
        while i < len(cand) - 1 and ema > cand[i] - 0.5 + up:
            i += 1
    return cand[i], ema


def band_slot(best: int, ranked: dict[int, float], accept: dict[int, float], initial: int) -> dict:
    """One band's entry: its best steps and near-best neighbours as candidates, with the hysteresis under which
    the slot settles on the best; pinned to the best alone when no hysteresis of the grid does."""
    top = ranked[best]
    cand = sorted({best} | {s for s in (best - 1, best + 1) if s in ranked and ranked[s] >= top * (1 - NEAR_BEST)})
    if len(cand) > 1:
        for up in HYSTERESIS_GRID:
            for down in HYSTERESIS_GRID:
                if settle(cand, accept, initial, up, down) == [best]:
                    return {"candidate_steps": cand, "up_hysteresis": up, "down_hysteresis": down, "ceiling_coeff": 0}
    return {"candidate_steps": [best], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}


def fit_config(
    best_by_band: dict[int, int], predicted: dict[int, dict[int, float]], accept: dict[int, float], initial: int
) -> dict:
    """best_by_band: {band batch size: steps}; predicted: {band: {steps: tokens/s}} (steps 0 = no speculation)."""
    acc = {0: 1.0, **accept}
    cfg = {str(b): band_slot(best_by_band[b], predicted[b], acc, initial) for b in sorted(best_by_band)}
    if "1" not in cfg:  # the smallest key serves every smaller batch too; say so in the file's own terms
        first = min(best_by_band)
        cfg = {"1": cfg[str(first)], **{k: v for k, v in cfg.items() if k != str(first)}}
    return cfg


def write(path, cfg: dict) -> Path:
    p = Path(path)
    p.write_text(json.dumps(cfg, indent=1) + "\n")
    return p


def default_settles(accept: dict[int, float], initial: int = 3) -> dict[int, list[int]]:
    """Where SGLang's default config settles per band with this acceptance (its own table, read from the
    installed release; None when it has none)."""
    try:
        from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG
    except ImportError:
        return {}
    acc = {0: 1.0, **accept}
    out = {}
    for k, e in DEFAULT_ADAPTIVE_CONFIG.items():
        if k.isdigit():
            out[int(k)] = settle(
                e["candidate_steps"], acc, initial, e.get("up_hysteresis", 0.0), e.get("down_hysteresis", -0.25)
            )
    return out


def slot_for(bs: int, keys: list[int]) -> int:
    """The config key serving batch bs (largest key <= bs, else the smallest)."""
    below = [k for k in sorted(keys) if k <= bs]
    return below[-1] if below else min(keys)
