"""What a dump dir says about its writers: the status file of each (status/<name>.json: state, error, counters;
read by `dump status` and the dump client), and the settings in dump_meta.json that every run appending to
the dir must share.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .config import ENV_ENCODING, META_FILE
from .encoding import NATIVE
from .sample_file import write_json_atomic

STATUS_DIR = "status"
# Fields of dump_meta.json that must match when a run appends to an existing dump dir.
IDENTITY_KEYS = ("layer_indices_hf", "hidden_size", "num_hidden_layers", "architecture", "final", "dtype",
                 "encoding")
IDENTITY_DEFAULTS = {"encoding": NATIVE}   # dumps made before the key existed


def meta_mismatch(root: Path, meta: dict) -> str | None:
    """Why this run may not append to the dump in `root` (None: it may; a new dir gets `meta` written)."""
    path = root / META_FILE
    if not path.exists():
        write_json_atomic(path, meta)
        return None
    try:
        old = json.loads(path.read_text())
    except ValueError as e:
        return f"{path} is unreadable ({e}); use a fresh dump dir"
    diff = {k: (old.get(k, IDENTITY_DEFAULTS.get(k)), meta.get(k)) for k in IDENTITY_KEYS
            if old.get(k, IDENTITY_DEFAULTS.get(k)) != meta.get(k)}
    if not diff:
        return None
    hint = f" ({ENV_ENCODING} selects the encoding)" if "encoding" in diff else ""
    return f"dump dir {root} holds a dump with different settings {diff} (existing, now){hint}; use a fresh dump dir"


class StatusFile:
    """status/<name>.json of one writer, and what it last showed (so a refresh writes only what changed)."""

    def __init__(self, root: Path, name: str):
        self.path = root / STATUS_DIR / f"{name}.json"
        self.at, self.counts = 0.0, {}

    def stale(self, every_s: float) -> bool:
        return time.monotonic() - self.at >= every_s

    def write(self, state: str, counts: dict, staging=None, error: str | None = None) -> None:
        """staging: the PinnedRing the capture copies into (its size and fallbacks are shown), or None."""
        self.counts, self.at = counts, time.monotonic()
        stats = dict(counts)
        if staging is not None:
            stats.update(staging_mb=staging.capacity >> 20, staging_fallbacks=staging.fallbacks)
        try:
            write_json_atomic(self.path, {"state": state, "error": error, "pid": os.getpid(), "time": time.time(),
                                          "stats": stats})
        except OSError:
            pass  # the disk may be the problem; the writer's log line says it
