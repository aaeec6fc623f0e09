"""`sglang-eagle3 bench` on the round trip's servers (GPU): three concurrency levels in one run, the HTML report
and its PNGs written under $OUT. Needs a finished round trip in $SGE3_RT_DIR (tests/gpu/test_roundtrip_gpu.py;
same SGE3_RT_TARGET / SGE3_RT_BACKEND). It can fail: the per-position acceptance read from SGLang's
`spec_accept_histogram` must agree with the accept length SGLang reports (completion tokens / verify steps),
and a FAIL verdict (accept length ~1, greedy outputs changed) fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import knobs
import pytest
from gpu_helpers import LOG_DIR, REPO, activation_env, free_port, sglang_server
from test_roundtrip_gpu import KIMI, SERVE_ARGS, SPEC_ARGS

pytestmark = pytest.mark.gpu
LEVELS = knobs.get("SGE3_BENCH_LEVELS")


def test_bench_levels_report():
    work = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent") / ("kimi" if KIMI else "")
    draft, target, held = work / "draft_sglang", work / "target", work / "heldout.jsonl"
    if not (draft / "config.json").exists() or not held.exists():
        pytest.skip("needs a finished round trip in $SGE3_RT_DIR (run tests/gpu/test_roundtrip_gpu.py first)")
    max_bs = str(max(int(x) for x in LEVELS.split(",")))
    serve = ["--preset", "tiny", "--model-path", str(target), *SERVE_ARGS, "--cuda-graph-max-bs", max_bs]
    env = activation_env(work)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    report, out_json = LOG_DIR / "bench_report.html", LOG_DIR / "bench_levels.json"
    with (
        sglang_server(
            [*serve, "--speculative-draft-model-path", str(draft), *SPEC_ARGS],
            name="bench_spec_server",
            port=free_port(),
            env=env,
        ) as (spec, _, _),
        sglang_server(serve, name="bench_base_server", port=free_port(), env=env) as (base, _, _),
    ):
        cmd = [
            sys.executable,
            "-m",
            "sglang_eagle3_ext",
            "bench",
            "--url",
            spec,
            "--baseline-url",
            base,
            "--prompts",
            str(held),
            "--max-new-tokens",
            knobs.get("SGE3_RT_NEW_TOKENS", "64"),
            "--concurrency",
            LEVELS,
            "--json",
            str(out_json),
            "--report",
            str(report),
            "--quiet",
        ]
        t = time.time()
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        (LOG_DIR / "bench_levels.log").write_text(
            f"$ {' '.join(cmd)}\n# rc={p.returncode} {time.time() - t:.1f}s\n{p.stdout}\n--- stderr ---\n{p.stderr}"
        )
    print(p.stdout)
    res = json.loads(out_json.read_text())
    assert [lv["concurrency"] for lv in res["levels"]] == [int(x) for x in LEVELS.split(",")]
    assert report.exists() and report.with_name("bench_report_acceptance.png").exists()
    assert report.with_name("bench_report_throughput.png").exists()
    for lv in res["levels"]:
        s = lv["spec"]
        pa = s["position_acceptance"]
        assert len(pa) == 3 and all(a >= b for a, b in zip(pa, pa[1:])), pa  # 4 draft tokens: 3 positions
        # SGLang's accept length counts the prefill's token too: 1 + mean accepted drafts, within ~1 token/request
        assert abs(s["accept_length"] - (1 + sum(pa))) <= 0.1 * s["accept_length"], (s["accept_length"], pa)
        print(
            f"bench c={lv['concurrency']}: accept length {s['accept_length']:.2f}, P(accepted) by position "
            f"{' '.join(f'{a:.3f}' for a in pa)}, {s['tokens_per_s']:.0f} vs {lv['baseline']['tokens_per_s']:.0f} "
            f"tok/s, speedup {lv['speedup']:.2f}x, greedy mismatches {lv['greedy_mismatches']}"
        )
    assert res["status"] != "FAIL" and p.returncode == 0, res["verdict"]
