"""The timing pass of one attention backend: a target-only server, then EAGLE-3 servers at two steps counts,
each driven with short greedy outputs at every concurrency (bench's request loop), each iteration's cost read
from the server's own log (bench/steps.py: the median decode interval at the full batch without an admission)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..bench.run import progress_bar, run_level
from ..bench.steps import step_summary
from ..server.http_client import Server
from .servers import TIMING_STEPS, Budget, server_args, started

TIMING_TOKENS = 48  # per request: enough full-batch iterations, little else


@dataclasses.dataclass
class TimingPlan:
    target: str
    draft: str
    concurrency: list[int]
    prompts: list[dict]
    out: Path
    extra_args: list[str]
    steps: tuple = TIMING_STEPS
    tokens: int = TIMING_TOKENS


def _level(srv, prompts: list[dict], c: int, tokens: int):
    """`2c` requests (at least 8) at concurrency c; returns bench's RunStats and the log written meanwhile."""

    n = max(2 * c, 8)
    batch = [prompts[i % len(prompts)] for i in range(n)]
    off = srv.log_offset()
    st = run_level(Server(srv.url, timeout=600), "timing", batch, [tokens] * n, c, progress_bar(n, True))
    return st, srv.log_since(off)


def _iteration_ms(text: str, c: int, st) -> tuple[float, str]:
    """The log's median iteration at batch c; else wall time per decode round (admissions included)."""

    s = step_summary(text, c)
    if "iteration_ms" in s:
        return s["iteration_ms"], "log"
    rounds = (st.verify_ct or st.output_tokens) / c  # decode rounds of the batch, admissions included
    return st.wall_s * 1e3 / max(rounds, 1), "wall"


def time_backend(p: TimingPlan, backend: str, budget: Budget, say) -> dict:
    """{"target_step_ms", "spec", "measured", "sources"} for one backend (timings.py's form), what the budget
    allowed of it."""
    res = {"target_step_ms": {}, "spec": [], "measured": [], "sources": []}
    max_c = max(p.concurrency)
    if not budget.allows(f"{backend} target-only timing", budget.server_estimate(len(p.concurrency))):
        return res
    with started(
        f"timing-{backend}-nospec", server_args(p.target, backend, max_c, extra=p.extra_args), p.out, budget
    ) as srv:
        for c in p.concurrency:
            st, text = _level(srv, p.prompts, c, p.tokens)
            ms, src = _iteration_ms(text, c, st)
            res["target_step_ms"][c] = ms
            res["sources"].append({"steps": 0, "bs": c, "source": src})
            say(f"{backend} target-only  c={c:<3} step {ms:.2f} ms  ({st.tokens_per_s:.0f} tok/s, {src})")
    for s in p.steps:
        if not budget.allows(f"{backend} EAGLE-3 timing at {s} steps", budget.server_estimate(len(p.concurrency))):
            break
        with started(
            f"timing-{backend}-s{s}",
            server_args(p.target, backend, max_c, p.draft, s, extra=p.extra_args),
            p.out,
            budget,
        ) as srv:
            for c in p.concurrency:
                st, text = _level(srv, p.prompts, c, p.tokens)
                ms, src = _iteration_ms(text, c, st)
                res["spec"].append({"bs": c, "steps": s, "iteration_ms": ms, "accept_length": st.accept_length})
                res["sources"].append({"steps": s, "bs": c, "source": src})
                say(
                    f"{backend} EAGLE-3 s={s}  c={c:<3} iteration {ms:.2f} ms  accept "
                    f"{st.accept_length or 0:.2f}  ({st.tokens_per_s:.0f} tok/s, {src})"
                )
    return res
