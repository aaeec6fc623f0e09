"""What one serving step and one admission cost, read from a SGLang server's own log
(`bench --spec-log SPEC.log --baseline-log BASE.log` reads both at each concurrency).

Run the server with `--decode-log-interval 1` (benchmarks/profile_spec.py does): SGLang then logs every
decode (or speculative) iteration with `gen throughput`, the tokens of that interval over the time since the
previous decode line, and every prefill batch in between. So the time of one interval is
tokens / throughput, with tokens = #running-req x accept length (1 without speculation) x interval:
- intervals with no prefill batch at the full batch `bs` give the cost of one iteration (median);
- intervals after k prefill batches give, beyond that, the cost of those k admissions (a new request's
  prefill, and with EAGLE-3 its draft-extend, stall every running request).
Why it exists: the Kimi-width round trip (SGLang 0.5.16, H200, FlashInfer, CUDA graphs on, GPU alone) decoded
at batch 16 at ~8500 tok/s speculative vs ~4400 target-only between admissions, yet ran 0.80x end to end at
concurrency 16 x 128 new tokens: requests finishing out of step were admitted one at a time.
Approximate by construction (a batch that changed size inside an interval, the first token of a prefill);
intervals longer than `idle_s` seconds (the server waited for requests) are left out.
"""

from __future__ import annotations

import re
import statistics

DECODE = re.compile(
    r"\] Decode batch(?: \[\d+\])?, #running-req: (?P<run>\d+),.*?"
    r"(?:accept len: (?P<acc>[0-9.]+),.*?)?gen throughput \(token/s\): (?P<tput>[0-9.]+)"
)
PREFILL = re.compile(r"\] Prefill batch(?: \[\d+\])?, #new-seq: (?P<new>\d+)")


def step_summary(text: str, bs: int, interval: int = 1, idle_s: float = 0.5) -> dict:
    """Iteration cost at batch `bs` and admission cost per prefill batch, from SGLang log lines."""
    pure, mixed, prefills, new_seqs = [], [], 0, 0
    for line in text.splitlines():
        if m := PREFILL.search(line):
            prefills, new_seqs = prefills + 1, new_seqs + int(m["new"])
            continue
        if not (m := DECODE.search(line)):
            continue
        run, tput = int(m["run"]), float(m["tput"])
        dt = run * float(m["acc"] or 1) * interval / tput if tput > 0 else None
        if dt is not None and dt <= idle_s and run == bs:  # other batches: other workloads
            if prefills:
                mixed.append((dt, prefills, new_seqs))
            else:
                pure.append(dt)
        prefills = new_seqs = 0
    if not pure:
        return {
            "error": f"no decode interval at batch {bs} without a prefill (is --decode-log-interval "
            f"{interval} what the server ran with?)"
        }
    it = statistics.median(pure) / interval
    res = {"batch": bs, "iteration_ms": round(it * 1e3, 3), "iterations": len(pure) * interval}
    if mixed:
        extra = [(dt - it * interval) / k for dt, k, _ in mixed]
        spent = sum(pure) + sum(dt for dt, _, _ in mixed)
        res.update(
            {
                "prefill_batches": sum(k for _, k, _ in mixed),
                "seqs_per_prefill_batch": round(sum(n for *_, n in mixed) / sum(k for _, k, _ in mixed), 2),
                "admission_ms": round(statistics.median(extra) * 1e3, 3),
                "admission_share": round(sum(dt - it * interval for dt, _, _ in mixed) / spent, 3),
            }
        )
    return res
