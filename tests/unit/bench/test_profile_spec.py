"""benchmarks/profile_spec.py's trace summary: GPU busy fraction from the union of kernel intervals (two streams
overlapping are not counted twice) and per-step kernel time by name, on a trace in the torch profiler's format."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _summary():
    spec = importlib.util.spec_from_file_location("profile_spec", REPO / "benchmarks" / "profile_spec.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kernel_summary


def test_busy_is_the_union_of_kernel_intervals(tmp_path):
    ev = [
        {"cat": "kernel", "name": "moe", "ts": 0, "dur": 400},  # 0-400
        {"cat": "kernel", "name": "attn", "ts": 200, "dur": 400},  # 200-600, overlaps moe on another stream
        {"cat": "kernel", "name": "moe", "ts": 800, "dur": 200},  # 800-1000: 200 us idle before it
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},
    ]  # not GPU time
    (tmp_path / "sub").mkdir()
    with gzip.open(tmp_path / "sub" / "x-TP-0.trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": ev}, fh)
    s = _summary()(tmp_path, steps=2)
    assert s["gpu_busy"] == 0.8  # 800 us of kernels' union in 1000 us
    assert s["wall_ms_per_step"] == 0.5
    assert s["kernel_ms_per_step"] == 0.5  # summed, overlap included
    assert list(s["top_kernels_ms_per_step"].items()) == [("moe", 0.3), ("attn", 0.2)]


def test_no_kernels_is_reported_not_divided_by_zero(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": [{"cat": "cpu_op", "name": "a", "ts": 0, "dur": 1}]}))
    assert "no kernel events" in _summary()(tmp_path, steps=4)["error"]


def test_cpu_ops_are_reported_apart_from_kernels(tmp_path):
    ev = [
        {"cat": "kernel", "name": "moe", "ts": 0, "dur": 100},
        {"cat": "cpu_op", "name": "aten::item", "ts": 0, "dur": 3000},  # a host sync the GPU waits on
        {"cat": "user_annotation", "name": "draft_extend", "ts": 0, "dur": 5000},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 7},
    ]  # neither kernel nor op
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": ev}))
    s = _summary()(tmp_path, steps=1)
    assert list(s["top_kernels_ms_per_step"]) == ["moe"]
    assert s["top_cpu_ms_per_step"] == {"draft_extend": 5.0, "aten::item": 3.0}
