"""Sample identity on disk and the manifest of complete samples.

A sample id comes from the request id (the dump client sets rid = sample id). Ids are sanitised
so that no request id can name a path outside the dump directory: only [A-Za-z0-9._-], no leading
dot, bounded length; anything rewritten gets a hash suffix so distinct ids stay distinct.

The manifest is append-only JSONL, one line per *complete* sample, written (and fsynced) only after
the sample file is fsynced and renamed into place. One manifest per writer (DP group) so concurrent
writers never interleave lines; readers take the union. A torn last line (crash mid-append) is ignored.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from pathlib import Path

from ..boundary import BadInput, check_type, field, regular_file
from .config import MANIFEST_DIR, SAMPLES_DIR

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_ID_LEN = 120
RECORD_COUNTS = ("num_tokens", "bytes")  # counts of a manifest record: integers >= 0 where present


def sanitize_id(raw: str) -> str:
    """A file-name-safe id; identical to `raw` when `raw` is already safe."""
    raw = str(raw)
    safe = _SAFE.sub("_", raw).lstrip(".")
    if safe != raw or len(safe) > MAX_ID_LEN or not safe:
        digest = hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe = f"{safe[: MAX_ID_LEN - 13]}-{digest}" if safe else f"id-{digest}"
    return safe


def sample_relpath(sample_id: str) -> str:
    """samples/<2 hex>/<id>.safetensors (sharded so no directory holds millions of files)."""
    sid = sanitize_id(sample_id)
    shard = hashlib.sha1(sid.encode()).hexdigest()[:2]
    return f"{SAMPLES_DIR}/{shard}/{sid}.safetensors"


@functools.lru_cache(maxsize=None)
def _resolved(path: str) -> Path:
    return Path(path).resolve()


def sample_path(dump_dir: str | os.PathLike, sample_id: str) -> Path:
    """Where a sample's file goes. Directories are resolved once each (the root, and each of the 256 shard
    dirs, which may be symlinks): per sample this costs no syscall, and each syscall of the writer's io
    threads is a GIL hand-off with the scheduler's forward thread."""
    root = _resolved(os.fspath(dump_dir))
    shard, name = os.path.split(sample_relpath(sample_id))
    shard_dir = _resolved(str(root / shard))
    if root not in shard_dir.parents or os.sep in name or name in (".", ".."):
        # defence in depth: sanitize_id already makes this impossible
        raise ValueError(f"sample id {sample_id!r} resolves outside the dump dir")
    return shard_dir / name


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_files(dump_dir: str | os.PathLike) -> list[Path]:
    """Every writer's manifest of this dump: regular files only (a FIFO would block its reader: BadInput);
    a manifest linked from outside the dump is not this dump's and is left out."""
    mdir = Path(dump_dir) / MANIFEST_DIR
    if not mdir.is_dir():
        return []
    root = Path(dump_dir).resolve()
    return [regular_file(f, "manifest") for f in sorted(mdir.glob("*.jsonl")) if root in f.resolve().parents]


def parse_manifest_line(line: bytes | str, where: str) -> dict | None:
    """One manifest line as its record; None for a torn line (a crash mid-append: that sample is not
    complete; the writer starts its next line on a fresh one). A line that parses but is not a record the
    writer writes is a BadInput naming `where` (file:line) and the key."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return None
    check_type(rec, dict, f"{where} (manifest line)")
    field(rec, "id", str, where, nonempty=True)
    field(rec, "file", str, where, nonempty=True)
    for key in RECORD_COUNTS:
        if key in rec:
            check_type(rec[key], int, f"{where}: {key!r}")
            if rec[key] < 0:
                raise BadInput(f"{where}: {key!r}", f"must be >= 0, got {rec[key]}")
    return rec


def read_manifest(dump_dir: str | os.PathLike) -> dict[str, dict]:
    """id -> record for every complete sample (union over all writers' manifests); BadInput naming
    file:line and key for a line that is not a manifest record."""
    out: dict[str, dict] = {}
    for f in manifest_files(dump_dir):
        with open(f, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                rec = parse_manifest_line(line, f"{f}:{n}")
                if rec is not None:
                    out.setdefault(rec["id"], rec)
    return out


class ManifestWriter:
    """Appends one fsynced JSON line per complete sample to manifests/<name>.jsonl."""

    def __init__(self, dump_dir: str | os.PathLike, name: str):
        mdir = Path(dump_dir) / MANIFEST_DIR
        mdir.mkdir(parents=True, exist_ok=True)
        self.path = mdir / f"{name}.jsonl"
        self._cond = threading.Condition()
        self._seq = self._committed = 0  # records numbered on arrival / written up to
        self._pending: list = []
        self._busy = False
        self._failed: dict[int, OSError] = {}
        fresh = not self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if fresh:
            fsync_dir(mdir)
        elif self.path.stat().st_size:
            with open(self.path, "rb") as fh:  # a torn last line must not swallow the next record
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def append(self, record: dict, sync_dir: str | os.PathLike | None = None) -> None:
        """Returns once the line (and, first, `sync_dir`: the directory the sample was renamed into) is
        fsynced. Group commit: io threads arriving while a commit runs are written by the next one
        together, so N samples cost one manifest fsync and one fsync per distinct directory, not N each."""
        line = (json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n").encode()
        with self._cond:
            self._seq += 1
            me = self._seq
            self._pending.append((me, line, sync_dir))
            while me > self._committed and self._busy:
                self._cond.wait()
            if me <= self._committed:  # a leader wrote it (or failed to)
                err = self._failed.pop(me, None)
                if err is not None:
                    raise err
                return
            self._busy = True
            batch, self._pending = self._pending, []
        err = None
        try:
            for d in dict.fromkeys(d for _, _, d in batch if d is not None):
                fsync_dir(d)
            data = b"".join(ln for _, ln, _ in batch)
            if self._fd < 0:
                raise OSError(f"{self.path} is closed")
            n = os.write(self._fd, data)
            if n != len(data):
                raise OSError(f"short write to {self.path} ({n}/{len(data)} bytes)")
            os.fsync(self._fd)
        except OSError as e:
            err = e
        with self._cond:
            self._busy = False
            self._committed = max(self._committed, batch[-1][0])
            if err is not None:
                self._failed.update((s, err) for s, _, _ in batch if s != me)
            self._cond.notify_all()
        if err is not None:
            raise err

    def close(self) -> None:
        with self._cond:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
