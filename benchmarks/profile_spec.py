"""GPU diagnosis: where one serving step's time goes, EAGLE-3 settings vs target-only, at one batch size.

    python benchmarks/profile_spec.py [--model DIR --draft DIR] [--bs 16] [--new-tokens 128]
        [--attention-backend triton] [--spec 3,1,4 --spec 1,1,2 ...] [--profile-steps 40]

Why it exists: the Kimi-width round trip (SGLang 0.5.16, H200, GPU alone, CUDA graphs on) ran ~2x at batch 1
but 0.87x (Triton) / 0.80x (FlashInfer) at concurrency 16. Its server log (read by sglang_eagle3_ext/bench/steps.py)
put one speculative iteration at batch 16 at 7.6 ms (target-only step 3.6 ms; accept 3.6: ~1.7x between
admissions) and each admission at ~47 ms per prefill batch (target-only: ~4 ms), 55% of the time. Which
part of an admission costs that (the draft's eager extend, CPU work, kernels) is what this profile shows.
A run of it (Triton, 16 requests at once): 29.4 ms per prefill batch with EAGLE-3 vs 31.6 ms
target-only, GPU busy 5% in the admission's trace: an admission costs the same (a CPU-bound eager prefill on the
10-layer toy); EAGLE-3 admits more often, its requests finishing out of step.

One server at a time (the GPU to itself): target-only, then one per --spec STEPS,TOPK,DRAFT_TOKENS. Each is
warmed with the workload, timed (output tok/s, greedy, --bs requests in flight), then profiled with SGLang's
own profiler (/start_profile with num_steps, CPU and GPU activities) over the same workload. Printed per server:
tok/s and the ratio to target-only, wall ms per scheduler step, the GPU busy fraction (union of kernel time /
the profiled span: low means the GPU waits on the CPU) and the kernels with the most GPU time per step.
Defaults as benchmarks/bench_serve.py: the Kimi-width predictable target and a random draft at its width (accept
length ~1 does not change what one iteration costs: the verify still runs every draft token). Writes
$OUT/profile_spec_BACKEND_bsN.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "gpu"), str(REPO / "benchmarks")]

from bench_serve import add_serving_args  # noqa: E402  (benchmarks/ on the path above)


def kernel_summary(trace_dir: Path, steps: int, top: int = 15, pattern: str = "*.json*") -> dict:
    """SGLang's trace files under trace_dir: GPU busy fraction and time per step by kernel name, and the CPU ops
    and annotations with the most (inclusive) time per step (a CPU-bound step shows there, not in the kernels)."""
    events = []
    for f in sorted(trace_dir.rglob(pattern)):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            doc = json.load(fh)
        events += [e for e in doc.get("traceEvents", []) if "dur" in e]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if not kernels:
        return {"error": f"no kernel events in {trace_dir}"}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)
    busy, end = 0.0, spans[0][0]
    for s, t in spans:  # union of intervals: overlapping streams are not counted twice
        if t > end:
            busy += t - max(s, end)
            end = t
    wall = spans[-1][1] - spans[0][0]

    def total_by_name(evs):
        by_name: dict[str, float] = defaultdict(float)
        for e in evs:
            by_name[e["name"]] += float(e["dur"])
        return by_name

    by_kernel = total_by_name(kernels)
    by_cpu = total_by_name(e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "python_function"))

    def top_of(d):
        return {n[:120]: round(us / 1e3 / steps, 3) for n, us in sorted(d.items(), key=lambda kv: -kv[1])[:top]}

    t0, t1 = min(float(e["ts"]) for e in events), max(float(e["ts"]) + float(e["dur"]) for e in events)
    res = {
        "wall_ms_per_step": round(wall / 1e3 / steps, 3),
        "gpu_busy": round(busy / wall, 3),
        "trace_ms": round((t1 - t0) / 1e3, 3),  # CPU and GPU events: the whole profiled span
        "kernel_ms_per_step": round(sum(by_kernel.values()) / 1e3 / steps, 3),
        "top_kernels_ms_per_step": top_of(by_kernel),
    }
    if by_cpu:
        res["top_cpu_ms_per_step"] = top_of(by_cpu)
    return res


def profile_server(base: str, log: Path, prompts, a, out_dir: Path) -> dict:
    """Timed workload (then its iterations and admissions from the server's log at --decode-log-interval 1), then
    the same workload under SGLang's profiler for a.profile_steps scheduler steps."""
    from bench_serve import workload

    from sglang_eagle3_ext.bench.steps import step_summary

    workload(base, prompts, a.bs, a.new_tokens)  # warm: JIT, graphs, prefill shapes
    timed = workload(base, prompts, a.bs, a.new_tokens)
    steps = step_summary(log.read_text(errors="replace"), a.bs) if log.exists() else {"error": f"no log {log}"}
    res = {"tok_s": round(timed["tok_s"], 1), "accept_length": timed["accept_length"], "steps": steps}
    profile_during(base, prompts, a, out_dir / "steps", {"num_steps": a.profile_steps})
    res.update(kernel_summary(out_dir / "steps", a.profile_steps))
    # one admission alone: SGLang's by-stage profile traces the prefill steps up to the next decode (EXTEND)
    profile_during(base, prompts, a, out_dir / "stage", {"num_steps": 1, "profile_by_stage": True})
    res["admission_profile"] = kernel_summary(out_dir / "stage", 1, pattern="*EXTEND*.json*")
    return res


POLL_S = 3.0  # between two looks at the traces' sizes: written when two looks agree


def profile_during(base: str, prompts, a, out_dir: Path, req: dict) -> None:
    """SGLang's profiler (CPU and GPU activities) started 1 s into the workload; returns once the traces are
    written (they appear after the last profiled step and grow until written)."""
    from bench_serve import workload
    from gpu_helpers import _server

    th = threading.Thread(target=workload, args=(base, prompts, a.bs, a.new_tokens))
    th.start()
    time.sleep(1.0)  # past the first prefills: decode steady state
    _server(base).request(
        "POST", "/start_profile", {"output_dir": str(out_dir), "activities": ["CPU", "GPU"], **req}, text=True
    )  # plain text reply
    th.join()
    deadline, sizes = time.time() + 180, None
    while time.time() < deadline:
        now = {f: f.stat().st_size for f in out_dir.rglob("*.json*")}
        if now and now == sizes:
            break
        sizes = now
        time.sleep(POLL_S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_serving_args(ap)
    ap.add_argument("--bs", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--spec", action="append", help="STEPS,TOPK,DRAFT_TOKENS (repeatable; default 3,1,4)")
    ap.add_argument("--profile-steps", type=int, default=40)
    a = ap.parse_args()
    from bench_serve import prompts_for, serving_setup
    from gpu_helpers import activation_env, free_port, sglang_server

    tmp = Path(tempfile.mkdtemp(prefix="sge3_profile_"))
    model, draft, common = serving_setup(a)
    settings = {"base": []}
    for s in a.spec or ["3,1,4"]:
        steps, topk, ndt = (int(x) for x in s.split(","))
        settings[f"spec_{steps}_{topk}_{ndt}"] = [
            "--speculative-draft-model-path",
            str(draft),
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-num-steps",
            str(steps),
            "--speculative-eagle-topk",
            str(topk),
            "--speculative-num-draft-tokens",
            str(ndt),
        ]
    prompts = prompts_for(a.bs, max(1, a.requests // a.bs), seed=4242)
    res = {
        "sglang": __import__("importlib.metadata").metadata.version("sglang"),
        "bs": a.bs,
        "model": str(model),
        "draft": str(draft),
        "new_tokens": a.new_tokens,
        "attention_backend": a.attention_backend,
        "servers": {},
    }
    for name, extra in settings.items():
        # every decode iteration logged: sglang_eagle3_ext/bench/steps.py reads iteration and admission costs from it
        with sglang_server(
            [*common, *extra, "--decode-log-interval", "1"],
            name=f"profile_{name}",
            port=free_port(),
            env=activation_env(tmp),
            launcher="sglang.launch_server",
            timeout=900,
        ) as (base, log, _):
            r = profile_server(base, log, prompts, a, tmp / f"trace_{name}")
        res["servers"][name] = r
        print(
            f"{name}: {r['tok_s']} tok/s, accept {r['accept_length']}, {r.get('wall_ms_per_step')} ms/step, "
            f"GPU busy {r.get('gpu_busy')}",
            flush=True,
        )
        st = r["steps"]
        print(
            f"    iteration {st.get('iteration_ms')} ms at batch {a.bs}; admission {st.get('admission_ms')} ms per "
            f"prefill batch ({st.get('seqs_per_prefill_batch')} requests each), {st.get('admission_share')} of "
            f"the time"
            if "error" not in st
            else f"    steps: {st['error']}"
        )
        for k, v in list(r.get("top_kernels_ms_per_step", {}).items())[:8]:
            print(f"    {v:8.3f} ms  {k}")
        for k, v in list(r.get("top_cpu_ms_per_step", {}).items())[:6]:
            print(f"    {v:8.3f} ms  CPU {k}")
        ad = r["admission_profile"]
        print(
            f"  one admission (by-stage EXTEND trace): {ad.get('trace_ms')} ms traced, GPU busy {ad.get('gpu_busy')}"
            if "error" not in ad
            else f"  one admission: {ad['error']}"
        )
        for k, v in [
            *list(ad.get("top_kernels_ms_per_step", {}).items())[:5],
            *[("CPU " + n, t) for n, t in list(ad.get("top_cpu_ms_per_step", {}).items())[:8]],
        ]:
            print(f"    {v:8.3f} ms  {k}")
    b = res["servers"]["base"]["tok_s"]
    for name, r in res["servers"].items():
        if name != "base":
            r["over_base"] = round(r["tok_s"] / b, 3)
            print(f"{name}/base bs{a.bs}: {r['over_base']:.3f}")
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"], f"profile_spec_{a.attention_backend}_bs{a.bs}.json")
        out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
