"""The stages' markers: `--out/.build/STAGE.json`, written atomically (a temporary file renamed into place).
A stage's marker says "started" before the stage runs and "done" (with what it reports) once it finished, each
with the inputs the stage is made from and their fingerprint (fingerprint.py). A marker that cannot be read
(empty, truncated, not JSON, not a regular file) is said in one line, removed, and its stage counts as not done."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from ..dump import driver
from ..json_file import write_json

STATE_DIR = ".build"
STARTED, DONE = "started", "done"
MAX_MARKER_BYTES = 16 << 20


def marker_path(out: Path, stage: str) -> Path:
    return Path(out) / STATE_DIR / f"{stage}.json"


def mark(out: Path, stage: str, fingerprint: str, inputs: dict, result: dict | None = None) -> None:
    """The marker of `stage`: started (result None) or done."""
    rec = {"stage": stage, "state": DONE if result is not None else STARTED, "fingerprint": fingerprint}
    rec["inputs"] = inputs
    if result is not None:
        rec["result"] = result
    path = marker_path(out, stage)
    remove(path)  # a folder or FIFO in its place would make the rename fail on every run
    write_json(path, rec)


def problem(rec, stage: str) -> str | None:
    """Why `rec` (a marker's parsed JSON) is not a marker of `stage` (None: it is)."""
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {type(rec).__name__}"
    if rec.get("stage") != stage:
        return f"it names stage {rec.get('stage')!r}"
    if rec.get("state") not in (STARTED, DONE):
        return f"state {rec.get('state')!r} is neither {STARTED!r} nor {DONE!r}"
    if not isinstance(rec.get("fingerprint"), str) or not isinstance(rec.get("inputs"), dict):
        return "it records no fingerprint of the stage's inputs"
    if rec["state"] == DONE and not isinstance(rec.get("result"), dict):
        return "a finished stage's marker without its result"
    return None


def read(out: Path, stage: str, say=None) -> dict | None:
    """The marker of `stage`, or None when there is none or it cannot be read (then said through `say`, and
    removed so the stage runs again)."""
    p = marker_path(out, stage)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        why = "not a regular file"  # a FIFO would block the reader
    elif st.st_size > MAX_MARKER_BYTES:
        why = f"larger than {MAX_MARKER_BYTES} bytes"
    else:
        try:
            rec = json.loads(p.read_bytes())
            why = problem(rec, stage)
        except (OSError, ValueError, RecursionError) as e:
            why = f"not JSON: {type(e).__name__}"
    if why is None:
        return rec
    if say is not None:
        say(f"stage {stage}: its marker {p} is unreadable ({why}); the stage counts as not done and runs again")
    remove(p)
    return None


def done(out: Path, stage: str) -> dict | None:
    """The stage's recorded result when its marker says it finished, else None."""
    rec = read(out, stage)
    return rec.get("result") if rec is not None and rec["state"] == DONE else None


def forget(out: Path, stages) -> None:
    """Drop the markers of `stages` (they will run again)."""
    for s in stages:
        remove(marker_path(out, s))


def remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)


def dump_size(dump_dir: Path) -> dict:

    st = driver.status(dump_dir)
    return {"dump_dir": str(dump_dir), "samples": st["complete_samples"], "tokens": st["tokens"], "bytes": st["bytes"]}
