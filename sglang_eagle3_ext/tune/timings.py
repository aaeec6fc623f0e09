"""The timing pass's file (`timings.json` in --out): what each attention backend measured.

    {"format": "sglang-eagle3-tune-timings/1", "gpu": "...", "sglang": "0.5.16", "target_layers": 10,
     "tp_size": 1,                                          # the timing servers' --tp-size (absent: 1)
     "backends": {"flashmla": {
         "target_step_ms": {"1": 3.1, "16": 3.75},          # target-only decode step per batch size
         "spec": [{"bs": 16, "steps": 3, "iteration_ms": 7.2, "accept_length": 3.6}, ...],
         "measured": [{"concurrency": 16, "steps": 3, "tokens_per_s": 4919.0,
                       "baseline_tokens_per_s": 3122.0}, ...]}}}     # end-to-end bench points (optional)

Read back checked field by field (BadInput naming the file and key): the cost model trusts nothing else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..boundary import BadInput, check_type, field, read_json_file

FORMAT = "sglang-eagle3-tune-timings/1"
MAX_BS = 1 << 16
MAX_STEPS = 64
MAX_MS = 1e6
MAX_TP = 1024


def _ms(v, where: str) -> float:
    check_type(v, (int, float), where)
    if isinstance(v, bool) or not math.isfinite(v) or not 0 < v <= MAX_MS:
        raise BadInput(where, f"expected milliseconds in (0, {MAX_MS:g}], got {v!r}")
    return float(v)


def _int(v, where: str, low: int, high: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise BadInput(where, f"expected an integer in [{low}, {high}], got {v!r:.40}")
    return v


def _positive(v, where: str, low: float = 0.0) -> float:
    check_type(v, (int, float), where)
    if isinstance(v, bool) or not math.isfinite(v) or v < low:
        raise BadInput(where, f"expected a finite number >= {low:g}, got {v!r}")
    return float(v)


def _backend(name: str, b, where: str) -> dict:
    check_type(b, dict, where)
    steps_raw = field(b, "target_step_ms", dict, where)
    target = {}
    for k, v in steps_raw.items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 6):
            raise BadInput(f"{where}.target_step_ms", f"keys are batch sizes (integer strings), got {k!r:.40}")
        target[_int(int(k), f"{where}.target_step_ms[{k!r}]", 1, MAX_BS)] = _ms(v, f"{where}.target_step_ms[{k!r}]")
    spec = []
    for i, p in enumerate(field(b, "spec", list, where, optional=True, default=[])):
        at = f"{where}.spec[{i}]"
        check_type(p, dict, at)
        al = field(p, "accept_length", (int, float), at, optional=True, default=None)
        spec.append(
            {
                "bs": _int(field(p, "bs", int, at), f"{at}.bs", 1, MAX_BS),
                "steps": _int(field(p, "steps", int, at), f"{at}.steps", 1, MAX_STEPS),
                "iteration_ms": _ms(field(p, "iteration_ms", (int, float), at), f"{at}.iteration_ms"),
                "accept_length": None if al is None else _positive(al, f"{at}.accept_length", 1.0),
            }
        )
    measured = []
    for i, p in enumerate(field(b, "measured", list, where, optional=True, default=[])):
        at = f"{where}.measured[{i}]"
        check_type(p, dict, at)
        base = field(p, "baseline_tokens_per_s", (int, float), at, optional=True, default=None)
        measured.append(
            {
                "concurrency": _int(field(p, "concurrency", int, at), f"{at}.concurrency", 1, MAX_BS),
                "steps": _int(field(p, "steps", int, at), f"{at}.steps", 0, MAX_STEPS),
                "tokens_per_s": _positive(field(p, "tokens_per_s", (int, float), at), f"{at}.tokens_per_s"),
                "baseline_tokens_per_s": None if base is None else _positive(base, f"{at}.baseline_tokens_per_s"),
            }
        )
    return {"target_step_ms": dict(sorted(target.items())), "spec": spec, "measured": measured}


def parse(obj, where: str) -> dict:
    """A timings object (as json.load gives it) checked; BadInput naming `where` and the key."""
    check_type(obj, dict, where)
    fmt = field(obj, "format", str, where)
    if fmt != FORMAT:
        raise BadInput(f"{where}.format", f"expected {FORMAT!r}, got {fmt!r:.60}: not a tune timings file")
    backends = field(obj, "backends", dict, where)
    layers = field(obj, "target_layers", int, where, optional=True, default=None)
    tp = field(obj, "tp_size", int, where, optional=True, default=1)
    return {
        "format": FORMAT,
        "gpu": field(obj, "gpu", str, where, optional=True, default=None),
        "sglang": field(obj, "sglang", str, where, optional=True, default=None),
        "target_layers": None if layers is None else _int(layers, f"{where}.target_layers", 1, 4096),
        "tp_size": _int(tp, f"{where}.tp_size", 1, MAX_TP),
        "backends": {str(k): _backend(str(k), v, f"{where}.backends[{k!r}]") for k, v in backends.items()},
    }


def read(path) -> dict:
    p = Path(path)
    return parse(read_json_file(p, "tune timings file"), str(p))


def to_json(t: dict) -> dict:
    """The parsed form back to the file's (integer batch keys as strings)."""
    return {
        **t,
        "backends": {
            n: {**b, "target_step_ms": {str(k): v for k, v in b["target_step_ms"].items()}}
            for n, b in t["backends"].items()
        },
    }


def write(path, t: dict) -> Path:
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(to_json(t), indent=1) + "\n")
    tmp.replace(p)
    return p
