"""The cost of one EAGLE-3 iteration from its parts, and the tokens/s it predicts.

    iteration(bs, s) = verify(bs, s + 1 tokens) + s x draft_step(bs) + extend(bs)

verify is priced from the target-only server's own decode steps: verifying k tokens for each of bs requests
costs what a decode step over bs x k tokens costs the target (`target_step`, interpolated between the measured
batch sizes, extrapolated along the last segment). draft_step and extend are then the least-squares solution per
batch size over the steps counts the timing pass measured (two at least; a third leaves a residual, and a
leave-one-out error). Predictions depend only on each batch size's intercept and slope in s, which the fit pins
down whatever the verify assumption; how the slope splits between verify and draft (the projection's concern)
is the assumption's.

Tokens/s (between admissions): concurrency x accept_length(s) / iteration(c, s); without speculation
concurrency / target_step(c). Steps 0 of a --speculative-adaptive server is no plain decode: SGLang's EAGLE worker
(speculative/eagle_worker_v2.py) verifies one token per request and still runs the draft extend, which keeps the
draft's cache warm for a shrinking batch, so it costs verify(bs, 1 token) + extend(bs) (`adaptive=True`).
"""

from __future__ import annotations

import dataclasses


def interp(points: dict[int, float], x: float) -> float:
    """Piecewise-linear through `points` (batch size -> ms), the end segments extended; one point: flat."""
    import bisect

    xs = sorted(points)
    if len(xs) == 1:
        return points[xs[0]]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    a, b = xs[i - 1], xs[i]
    return points[a] + (points[b] - points[a]) * (x - a) / (b - a)


@dataclasses.dataclass
class Parts:
    """One backend's fitted parts at one batch size (ms)."""

    bs: int
    target_step: float
    draft_step: float
    extend: float
    residual_ms: float | None = None  # root-mean-square residual of the fit (None: exactly determined)

    def verify(self, tokens_per_request: int, target_steps: dict[int, float]) -> float:
        return interp(target_steps, self.bs * tokens_per_request)


def fit_bs(bs: int, target_steps: dict[int, float], points: list[tuple[int, float]]) -> Parts:
    """points: [(steps, iteration_ms)] at batch size bs, two distinct steps counts at least. Least squares of
    iteration - verify(bs, s+1) = extend + s x draft_step."""
    import numpy as np

    if len({s for s, _ in points}) < 2:
        raise ValueError(f"batch {bs}: the fit needs two steps counts at least, got {sorted({s for s, _ in points})}")
    s = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] - interp(target_steps, bs * (p[0] + 1)) for p in points])
    a = np.stack([np.ones_like(s), s], 1)
    (extend, draft), *_ = np.linalg.lstsq(a, y, rcond=None)
    res = y - a @ np.array([extend, draft])
    rms = float(np.sqrt((res**2).mean())) if len(points) > 2 else None
    return Parts(bs, interp(target_steps, bs), float(draft), float(extend), rms)


@dataclasses.dataclass
class BackendModel:
    name: str
    target_steps: dict[int, float]
    parts: dict[int, Parts]

    def part(self, bs: int) -> Parts:
        """The fitted parts at bs: measured, or interpolated between the measured batch sizes."""
        if bs in self.parts:
            return self.parts[bs]
        d = interp({b: p.draft_step for b, p in self.parts.items()}, bs)
        e = interp({b: p.extend for b, p in self.parts.items()}, bs)
        return Parts(bs, interp(self.target_steps, bs), d, e)

    def iteration_ms(self, bs: int, steps: int, adaptive: bool = False) -> float:
        """steps 0: a target-only server's decode step, or (adaptive) an adaptive slot at 0 steps."""
        if steps == 0 and not adaptive:
            return interp(self.target_steps, bs)
        p = self.part(bs)
        return interp(self.target_steps, bs * (steps + 1)) + steps * p.draft_step + p.extend

    def tokens_per_s(self, bs: int, steps: int, accept: dict[int, float], adaptive: bool = False) -> float:
        al = 1.0 if steps == 0 else accept[steps]
        return bs * al / self.iteration_ms(bs, steps, adaptive) * 1e3


def fit(name: str, b: dict) -> BackendModel:
    """One backend's timings (timings.parse's form) -> its model; ValueError naming what is missing."""
    if not b["target_step_ms"]:
        raise ValueError(f"{name}: no target-only decode step was measured")
    by_bs: dict[int, list] = {}
    for p in b["spec"]:
        by_bs.setdefault(p["bs"], []).append((p["steps"], p["iteration_ms"]))
    parts = {
        bs: fit_bs(bs, b["target_step_ms"], pts) for bs, pts in sorted(by_bs.items()) if len({s for s, _ in pts}) >= 2
    }
    if not parts:
        raise ValueError(f"{name}: no batch size has EAGLE-3 iterations at two steps counts")
    return BackendModel(name, dict(b["target_step_ms"]), parts)


def errors(m: BackendModel, b: dict, accept: dict[int, float]) -> dict:
    """The model against what was measured: iteration times (in-sample, and leave-one-out where a batch size has
    three steps counts or more) and end-to-end tokens/s (bench; these include admissions and prefills, which the
    model leaves out)."""
    rel = lambda pred, meas: (pred - meas) / meas  # noqa: E731
    fitted = [rel(m.iteration_ms(p["bs"], p["steps"]), p["iteration_ms"]) for p in b["spec"] if p["bs"] in m.parts]
    loo = []
    by_bs: dict[int, list] = {}
    for p in b["spec"]:
        by_bs.setdefault(p["bs"], []).append((p["steps"], p["iteration_ms"]))
    for bs, pts in by_bs.items():
        if len({s for s, _ in pts}) < 3:
            continue
        for i, (s, ms) in enumerate(pts):
            rest = pts[:i] + pts[i + 1 :]
            if len({x for x, _ in rest}) < 2:
                continue
            p = fit_bs(bs, m.target_steps, rest)
            pred = interp(m.target_steps, bs * (s + 1)) + s * p.draft_step + p.extend
            loo.append(rel(pred, ms))
    e2e = [
        rel(m.tokens_per_s(p["concurrency"], p["steps"], accept), p["tokens_per_s"])
        for p in b["measured"]
        if p["steps"] == 0 or p["steps"] in accept
    ]

    def summary(xs):
        if not xs:
            return {"points": 0}
        return {
            "points": len(xs),
            "mean_abs": sum(map(abs, xs)) / len(xs),
            "max_abs": max(map(abs, xs)),
            "mean": sum(xs) / len(xs),
        }

    return {
        "iteration_in_sample": summary(fitted),
        "iteration_leave_one_out": summary(loo),
        "tokens_per_s_end_to_end": summary(e2e),
    }


def grid(models: dict[str, BackendModel], accept: dict[int, float], concurrency: list[int]) -> list[dict]:
    """Predicted tokens/s for every (backend, steps 0..max, concurrency); steps 0 = no speculation."""
    out = []
    for name, m in models.items():
        for c in concurrency:
            for s in [0, *sorted(accept)]:
                out.append(
                    {
                        "backend": name,
                        "steps": s,
                        "concurrency": c,
                        "iteration_ms": round(m.iteration_ms(c, s), 4),
                        "accept_length": 1.0 if s == 0 else accept[s],
                        "tokens_per_s": m.tokens_per_s(c, s, accept),
                    }
                )
    return out
