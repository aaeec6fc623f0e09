"""The stages' completeness markers: `--out/.build/STAGE.json`, written last and atomically (a temporary file
renamed into place), holding what the stage reports. A stage without its marker did not finish."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..dump import driver

STATE_DIR = ".build"


def marker_path(out: Path, stage: str) -> Path:
    return Path(out) / STATE_DIR / f"{stage}.json"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj) -> None:
    write_atomic(path, json.dumps(finite(obj), indent=2, default=str, allow_nan=False) + "\n")


def finite(obj):
    """NaN/Infinity are not JSON: null."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def mark_done(out: Path, stage: str, result: dict) -> None:
    write_json_atomic(marker_path(out, stage), {"stage": stage, "result": result})


def done(out: Path, stage: str) -> dict | None:
    """The stage's recorded result when its marker is there and readable, else None (not finished)."""
    p = marker_path(out, stage)
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return rec.get("result") if isinstance(rec, dict) and isinstance(rec.get("result"), dict) else None


def forget(out: Path, stages) -> None:
    """Drop the markers of `stages` (they will run again)."""
    for s in stages:
        marker_path(out, s).unlink(missing_ok=True)


def dump_size(dump_dir: Path) -> dict:

    st = driver.status(dump_dir)
    return {"dump_dir": str(dump_dir), "samples": st["complete_samples"], "tokens": st["tokens"], "bytes": st["bytes"]}
