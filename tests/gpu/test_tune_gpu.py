"""`tune` at Kimi width (SGLang 0.5.16, H200, CUDA graphs on), on the target and draft the Kimi-width round trip
prepared (`SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rtk SGE3_RT_PREPARE_ONLY=1 ... test_roundtrip`):

- test_speedup_table: FA3 beside FlashMLA and Triton, 3 steps, concurrency 1/4/16/32, outputs of 64:1024
  tokens, each backend's target-only and EAGLE-3 servers started once, side by side, benched with our bench
  library (greedy outputs compared token for token); figures printed as they come, the table written to
  $OUT/tune_speedup_table.{json,md};
- test_tune_within_budget: `sglang-eagle3 tune --budget-min 8` on the same target, draft and dump: presets,
  timings.json, tune.json under $OUT/tune.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import knobs
import pytest
from gpu_helpers import LOG_DIR, backend_missing, free_port, sglang_server

pytestmark = pytest.mark.gpu

# the round trip's own stages per target (test_roundtrip_gpu.py): Kimi width where speculation pays, the tiny
# target to prove the whole tune path on any GPU in a few minutes
WORK = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent") / ("kimi" if knobs.get("SGE3_RT_TARGET") == "kimi" else "")
TARGET, DRAFT = WORK / "target", WORK / "draft_sglang"
BACKENDS = ("fa3", "flashmla", "triton")
LEVELS = (1, 4, 16, 32)
REQUESTS = {1: 3, 4: 4, 16: 16, 32: 32}  # few requests per point: one wave at 16 and 32
STEPS = 3
MLA_ONLY = ("flashmla",)
BUDGET_MIN = knobs.get("SGE3_TUNE_BUDGET_MIN")


def _need_prepared():
    if not (DRAFT / "config.json").is_file() or not (TARGET / "config.json").is_file():
        pytest.skip(f"needs the Kimi-width round trip prepared in {WORK.parent} (SGE3_RT_PREPARE_ONLY=1)")


def _graph_args() -> list[str]:
    """CUDA graphs up to the highest level, spelled as the installed SGLang spells the flag (tune sets its own)."""
    from sglang_eagle3_ext.tune import flags

    parser = flags.sglang_parser()
    return flags.spell({flags.graph_max_bs_field(parser): max(LEVELS)}, parser)


def _mem_args() -> list[str]:
    # two Kimi-width servers side by side: a KV cap each
    return [
        "--skip-tokenizer-init",
        "--sampling-backend",
        "pytorch",
        "--grammar-backend",
        "none",
        "--max-total-tokens",
        knobs.get("SGE3_MAX_TOTAL_TOKENS") or "65536",
    ]


def _spec_args(backend: str) -> list[str]:
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(DRAFT),
        "--speculative-num-steps",
        str(STEPS),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(STEPS + 1),
    ] + (["--speculative-draft-attention-backend", "triton"] if backend in MLA_ONLY else [])


def _vocab() -> int:
    return int(json.loads((TARGET / "config.json").read_text()).get("vocab_size", 32000))


def test_speedup_table():
    _need_prepared()
    from sglang_eagle3_ext.bench.run import BenchOptions, benchmark

    rows, t0 = [], time.time()
    out = Path(os.environ.get("OUT") or LOG_DIR)
    out.mkdir(parents=True, exist_ok=True)
    mem = ["--mem-fraction-static", "0.45"]
    for backend in BACKENDS:
        why = backend_missing(backend)
        if why:
            print(f"[table] {backend}: skipped ({why})", flush=True)
            rows.append({"backend": backend, "skipped": why})
            continue
        common = ["--model-path", str(TARGET), "--attention-backend", backend, *_graph_args(), *_mem_args(), *mem]
        with (
            sglang_server(common, name=f"table_{backend}_base", port=free_port()) as (base, _, _),
            sglang_server([*common, *_spec_args(backend)], name=f"table_{backend}_s{STEPS}", port=free_port()) as (
                spec,
                _,
                _,
            ),
        ):
            print(f"[table] {backend}: servers up at {time.time() - t0:.0f} s", flush=True)
            for c in LEVELS:
                res = benchmark(
                    BenchOptions(
                        url=spec,
                        baseline_url=base,
                        num_prompts=REQUESTS[c],
                        seed=c,
                        vocab_size=_vocab(),
                        max_new_tokens=(64, 1024),
                        concurrency=(c,),
                        warmup=1,
                        quiet=True,
                        timeout=900,
                    )
                )
                lv = res["levels"][0]
                row = {
                    "backend": backend,
                    "steps": STEPS,
                    "concurrency": c,
                    "requests": REQUESTS[c],
                    "spec_tokens_per_s": round(lv["spec"]["tokens_per_s"], 1),
                    "baseline_tokens_per_s": round(lv["baseline"]["tokens_per_s"], 1),
                    "speedup": round(lv["speedup"], 3),
                    "accept_length": lv["spec"]["accept_length"],
                    "greedy_mismatches": lv["greedy_mismatches"],
                }
                rows.append(row)
                print(
                    f"[table] {backend} c={c}: {row['spec_tokens_per_s']:.0f} vs {row['baseline_tokens_per_s']:.0f} "
                    f"tok/s = {row['speedup']:.2f}x, accept {row['accept_length'] or 0:.2f}, greedy mismatches "
                    f"{row['greedy_mismatches']} ({time.time() - t0:.0f} s)",
                    flush=True,
                )
                (out / "tune_speedup_table.json").write_text(json.dumps(rows, indent=1))
    md = [
        "| backend | c | EAGLE-3 tok/s | target-only tok/s | speedup | accept | greedy mismatches |",
        "|---|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['backend']} | {r['concurrency']} | {r['spec_tokens_per_s']} | {r['baseline_tokens_per_s']} | "
        f"{r['speedup']:.2f}x | {r['accept_length'] or 0:.2f} | {r['greedy_mismatches']} |"
        for r in rows
        if "skipped" not in r
    ]
    (out / "tune_speedup_table.md").write_text("\n".join(md) + "\n")
    print("\n".join(md), flush=True)
    timed = [r for r in rows if "skipped" not in r]
    assert timed, rows
    assert all(r["greedy_mismatches"] == 0 for r in timed), [r for r in timed if r["greedy_mismatches"]]


def test_tune_within_budget():
    _need_prepared()
    data = WORK / "hs"
    if not data.exists():
        pytest.skip(f"needs the round trip's export {data}")
    out = Path(os.environ.get("OUT") or LOG_DIR) / "tune"
    cmd = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext.cli.tune",
        "--target",
        str(TARGET),
        "--draft",
        str(DRAFT),
        "--data",
        str(data),
        "--concurrency",
        "1,4,16,32",
        "--budget-min",
        BUDGET_MIN,
        "--backends",
        knobs.get("SGE3_TUNE_BACKENDS") or "flashmla,fa3,triton",
        "--new-tokens",
        "64:256",
        "--num-prompts",
        "32",
        "--per-band",
        "1",
        "--samples",
        "32",
        "--out",
        str(out),
        "--server-args",
        " ".join([*_mem_args(), "--mem-fraction-static", "0.45"]),
        "--json",
        str(out / "report.json"),
    ]
    t0 = time.time()
    p = subprocess.run(cmd, text=True, stdout=sys.stdout, stderr=sys.stderr, timeout=1200)
    print(f"[tune] exit {p.returncode} after {time.time() - t0:.0f} s", flush=True)
    assert p.returncode == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["budget"]["spent_gpu_min"] <= float(BUDGET_MIN) + 3, rep[
        "budget"
    ]  # the last server may run past the line
    assert list(out.glob("tuned-c*.yaml")) and (out / "timings.json").is_file()
