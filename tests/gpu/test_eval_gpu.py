"""`sglang-eagle3 eval` against real serving (GPU): the accept length predicted offline beside the one SGLang
reports on the same held-out prompts, for drafts of different quality. Needs a prepared round trip in
$SGE3_RT_DIR (tests/gpu/test_roundtrip_gpu.py; SGE3_RT_PREPARE_ONLY=1 is enough; same SGE3_RT_TARGET /
SGE3_RT_BACKEND / SGE3_RT_SPEC_STEPS): its target, its speculators export `hs/` and its trained draft.

Drafts: the round trip's, and deliberately weak ones (the same recipe stopped after WEAK_STEPS optimizer
steps, or after one epoch; made once and kept in $SGE3_RT_DIR); with $SGE3_KIMI_RT_DIR, the Kimi-K2.5 wrapper's
MLA draft (test_kimi_gpu.py's round trip). Each is served with EAGLE-3, topk 1, CUDA graphs on; `eval --url`
simulates the held-out split `train` kept out of `hs/` and sends the same prompts to the server. Written:
$OUT/eval_predicted_vs_served_<target>.json (per draft and per position). It can fail: |predicted - served| <=
0.15 accept length for every draft.
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
from test_roundtrip_gpu import KIMI, SERVE_ARGS, SPEC_ARGS, SPEC_STEPS, _run

pytestmark = pytest.mark.gpu
TOLERANCE = 0.15
WEAK_STEPS = 10          # optimizer steps of the weakest draft (the round trip's trains for 12 epochs)


def _weak_draft(work: Path, name: str = "weak", budget: tuple = ("--steps", str(WEAK_STEPS))) -> Path:
    """The round trip's recipe cut short (`budget`: train flags), converted to SGLang's layout; made once per
    $SGE3_RT_DIR."""
    out, spec = work / f"eval_{name}_draft_sglang", work / f"eval_{name}_draft_speculators"
    if (out / "config.json").exists():
        return out
    if not (spec / "config.json").exists():
        p = _run(["sglang_eagle3_ext.train_draft", "--data", str(work / "hs"), "--target", str(work / "target"),
                  "--out", str(spec), "--device", "cuda", *budget, "--lr", "3e-3",
                  "--min-val-acc", "0", "--loss-impl", "eager"], f"eval_{name}_train", timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
    p = _run(["sglang_eagle3_ext.convert", str(spec), str(out)], f"eval_{name}_convert")
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _eval_served(work: Path, name: str, draft: Path, preset: str = "tiny", data: Path | None = None) -> dict:
    """Serve `draft` on the target of `work`, run `eval --url` on it; the eval report."""
    out_json = LOG_DIR / f"eval_{name}.json"
    serve = ["--preset", preset, "--model-path", str(work / "target"), *SERVE_ARGS,
             "--speculative-draft-model-path", str(draft), *SPEC_ARGS]
    with sglang_server(serve, name=f"eval_{name}_server", port=free_port(), env=activation_env(work)) as (url, _, _):
        cmd = [sys.executable, "-m", "sglang_eagle3_ext", "eval", "--draft", str(draft),
               "--data", str(data or work / "hs"), "--target", str(work / "target"), "--steps", str(SPEC_STEPS),
               "--topk", "1", "--draft-tokens", str(SPEC_STEPS + 1), "--device", "cuda", "--dtype", "bf16",
               "--url", url, "--json", str(out_json), "--quiet"]
        t = time.time()
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        (LOG_DIR / f"eval_{name}.log").write_text(f"$ {' '.join(cmd)}\n# rc={p.returncode} {time.time() - t:.1f}s\n"
                                                  f"{p.stdout}\n--- stderr ---\n{p.stderr}")
    assert p.returncode == 0, p.stderr[-3000:]
    print(p.stdout)
    return json.loads(out_json.read_text())


def _row(rep: dict) -> dict:
    s = rep["served"]
    return {"predicted": rep["predicted_accept_length"], "served": s["accept_length"], "difference": s["difference"],
            "predicted_positions": [p["p"] for p in rep["rounds"]["positions"]],
            "served_positions": [p["p"] for p in s["positions"]],
            "every_anchor": {"accept_length": rep["accept_length_every_anchor"], "anchors": rep["anchors"],
                             "positions": [p["p"] for p in rep["positions"]]},
            "rounds": {"predicted": rep["rounds"]["rounds"], "served": s["verify_rounds"]},
            "greedy_outputs_equal_recorded": f"{s['outputs_equal_recorded']}/{s['requests']}",
            "heldout": rep["heldout"]["rule"], "samples_per_s": rep["samples_per_s"]}


def _table(name: str, target: str, table: dict) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / f"eval_predicted_vs_served_{name}.json").write_text(json.dumps(
        {"target": target, "steps": SPEC_STEPS, "tolerance": TOLERANCE, "drafts": table}, indent=2))
    for d, r in table.items():
        print(f"eval [{d}]: predicted {r['predicted']:.3f}, served {r['served']:.3f} (diff {r['difference']:+.3f}); "
              f"per position predicted {r['predicted_positions']} served {r['served_positions']}; every anchor "
              f"{r['every_anchor']['accept_length']:.3f}; outputs equal recorded {r['greedy_outputs_equal_recorded']}")
    for d, r in table.items():
        assert abs(r["difference"]) <= TOLERANCE, (d, r)


def test_predicted_accept_length_matches_served():
    """The round trip's draft and two weak ones (10 optimizer steps; one epoch) of the same recipe."""
    work = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent") / ("kimi" if KIMI else "")
    if not all((work / n / "config.json").exists() for n in ("target", "draft_sglang")) or not (work / "hs").is_dir():
        pytest.skip("needs a prepared round trip in $SGE3_RT_DIR (tests/gpu/test_roundtrip_gpu.py, "
                    "SGE3_RT_PREPARE_ONLY=1 is enough)")
    drafts = {"roundtrip": work / "draft_sglang", "weak": _weak_draft(work)}
    if not KIMI:
        drafts["one_epoch"] = _weak_draft(work, "one_epoch", ("--epochs", "1"))
    table = {name: _row(_eval_served(work, name, d)) for name, d in drafts.items()}
    _table("kimi_width" if KIMI else "tiny", "kimi" if KIMI else "tiny", table)


def test_kimi_wrapper_mla_draft_predicted():
    """The Kimi-K2.5 wrapper's MLA draft (test_kimi_gpu.py's round trip, kept in $SGE3_KIMI_RT_DIR)."""
    work = Path(knobs.get("SGE3_KIMI_RT_DIR") or "/nonexistent")
    if not all((work / n / "config.json").exists() for n in ("target", "draft_mla")) or not (work / "hs").is_dir():
        pytest.skip("needs the Kimi wrapper round trip in $SGE3_KIMI_RT_DIR (tests/gpu/test_kimi_gpu.py -k roundtrip)")
    table = {"kimi_wrapper_mla": _row(_eval_served(work, "kimi_wrapper_mla", work / "draft_mla", "tiny-kimi-k25"))}
    _table("kimi_wrapper", "tiny Kimi-K2.5 wrapper", table)
