"""What a dump dir says about its writers: the status file of each (status/<name>.json: state, error, counters;
read by `dump status` and the dump client), the settings in dump_meta.json that every run appending to the dir
must share, and the checks of the dir itself at start-up (exists, writable, still the same dir).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..boundary import BadInput, read_json_file
from .config import ENV_ENCODING, META_FILE
from .encoding import NATIVE
from .sample_file import write_json_atomic

STATUS_DIR = "status"
# Fields of dump_meta.json that must match when a run appends to an existing dump dir.
IDENTITY_KEYS = ("layer_indices_hf", "hidden_size", "num_hidden_layers", "architecture", "final", "dtype", "encoding")
IDENTITY_DEFAULTS = {"encoding": NATIVE}  # dumps made before the key existed


def meta_mismatch(root: Path, meta: dict) -> str | None:
    """Why this run may not append to the dump in `root` (None: it may; a new dir gets `meta` written)."""
    path = root / META_FILE
    if not os.path.lexists(path):
        write_json_atomic(path, meta)
        return None
    try:  # a regular file holding a JSON object: a FIFO there would block the server's start-up for ever
        old = read_json_file(path, "the dump's settings")
    except BadInput as e:
        return f"{e}; use a fresh dump dir"
    diff = {
        k: (old.get(k, IDENTITY_DEFAULTS.get(k)), meta.get(k))
        for k in IDENTITY_KEYS
        if old.get(k, IDENTITY_DEFAULTS.get(k)) != meta.get(k)
    }
    if not diff:
        return None
    hint = f" ({ENV_ENCODING} selects the encoding)" if "encoding" in diff else ""
    return f"dump dir {root} holds a dump with different settings {diff} (existing, now){hint}; use a fresh dump dir"


class DumpStartupError(RuntimeError):
    pass


def dir_identity(path) -> tuple | None:
    """(device, inode) of a directory, None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def validate_dump_root(path: str) -> Path:
    """The dump dir (the root every run writes under) exists, is a directory and is writable: a typo must
    not silently create a new tree. DumpStartupError otherwise."""
    p = Path(path)
    if not p.is_dir():
        raise DumpStartupError(f"dump dir {path} does not exist (create it first; it is not created for you)")
    probe = p / f".write_probe.{os.getpid()}"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"ok")
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as e:
        raise DumpStartupError(f"dump dir {path} is not writable: {e}") from e
    return p


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
            write_json_atomic(
                self.path, {"state": state, "error": error, "pid": os.getpid(), "time": time.time(), "stats": stats}
            )
        except OSError:
            pass  # the disk may be the problem; the writer's log line says it
