"""The search: every (backend, steps, concurrency) predicted by the cost model, the top candidates per
concurrency band measured with `bench` on the user's prompts against the same backend's target-only server
(greedy outputs compared token for token), and admissions grouped (`--max-running-requests` at the band's
concurrency) tried on the best of the busy bands."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..bench.run import BenchOptions, benchmark
from .servers import Budget, server_args, started

GROUPED_FROM = 16  # bands from this concurrency on also try grouped admissions


@dataclasses.dataclass(frozen=True)
class Candidate:
    backend: str
    steps: int
    max_running: int | None = None

    @property
    def label(self) -> str:
        return (f"{self.backend} steps {self.steps}" if self.steps else f"{self.backend} no speculation") + (
            f" max-running {self.max_running}" if self.max_running else ""
        )


def top_candidates(grid: list[dict], concurrency: list[int], per_band: int) -> dict[int, list[Candidate]]:
    """The `per_band` best predicted speculative settings per band (+ the best with grouped admissions)."""
    out = {}
    for c in concurrency:
        rows = sorted((r for r in grid if r["concurrency"] == c and r["steps"] > 0), key=lambda r: -r["tokens_per_s"])
        picks = [Candidate(r["backend"], r["steps"]) for r in rows[:per_band]]
        if c >= GROUPED_FROM and picks:
            picks.append(dataclasses.replace(picks[0], max_running=c))
        out[c] = picks
    return out


def measure(
    cands: dict[int, list[Candidate]],
    target: str,
    draft: str,
    prompts_file: str | None,
    tokenizer,
    new_tokens: tuple[int, int],
    num_prompts: int | None,
    out: Path,
    extra: list[str],
    budget: Budget,
    say,
) -> list[dict]:
    """Each candidate's server started once and benched at every band it is a candidate for; one target-only
    server per backend beside it. Returns [{"candidate", "concurrency", "tokens_per_s", "baseline_tokens_per_s",
    "speedup", "accept_length", "greedy_mismatches"}]."""

    by_cand: dict[Candidate, list[int]] = {}
    for c, cs in cands.items():
        for cand in cs:
            by_cand.setdefault(cand, []).append(c)
    max_c = max(cands)
    rows = []
    for backend in dict.fromkeys(c.backend for c in by_cand):
        mine = [c for c in by_cand if c.backend == backend]
        if not budget.allows(f"{backend} target-only server for the measurements", budget.server_estimate(1)):
            continue
        with started(
            f"measure-{backend}-nospec", server_args(target, backend, max_c, extra=extra), out, budget
        ) as base:
            for cand in mine:
                levels = tuple(sorted(by_cand[cand]))
                if not budget.allows(f"measure {cand.label}", budget.server_estimate(len(levels))):
                    continue
                name = f"measure-{backend}-s{cand.steps}" + (f"-mr{cand.max_running}" if cand.max_running else "")
                base_args = server_args(target, backend, max_c, draft, cand.steps, cand.max_running, extra)
                with started(name, base_args, out, budget) as spec:
                    res = benchmark(
                        BenchOptions(
                            url=spec.url,
                            baseline_url=base.url,
                            prompts=prompts_file,
                            tokenizer=tokenizer,
                            num_prompts=num_prompts,
                            max_new_tokens=new_tokens,
                            concurrency=levels,
                            quiet=True,
                            wait_for_server=0,
                            timeout=900,
                        )
                    )
                for lv in res["levels"]:
                    row = {
                        "candidate": dataclasses.asdict(cand),
                        "label": cand.label,
                        "concurrency": lv["concurrency"],
                        "tokens_per_s": lv["spec"]["tokens_per_s"],
                        "baseline_tokens_per_s": (lv["baseline"] or {}).get("tokens_per_s"),
                        "speedup": lv.get("speedup"),
                        "accept_length": lv["spec"]["accept_length"],
                        "greedy_mismatches": lv.get("greedy_mismatches"),
                        "requests": lv["spec"]["requests"],
                    }
                    rows.append(row)
                    say(
                        f"measured {cand.label} c={row['concurrency']}: {row['tokens_per_s']:.0f} tok/s, "
                        f"{row['speedup'] or 0:.2f}x, accept {row['accept_length'] or 0:.2f}, greedy mismatches "
                        f"{row['greedy_mismatches']}"
                    )
    return rows


def best_per_band(rows: list[dict]) -> dict[int, dict]:
    """The fastest measured setting per band among those whose greedy outputs equal the target's."""
    out: dict[int, dict] = {}
    for r in rows:
        if r["greedy_mismatches"]:
            continue
        c = r["concurrency"]
        if c not in out or r["tokens_per_s"] > out[c]["tokens_per_s"]:
            out[c] = r
    return out
