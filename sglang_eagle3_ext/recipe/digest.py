"""Files known by their content: a file's sha256, a folder's over every path under it, its size and its bytes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_id(d) -> dict | str:
    """A folder by its files' content: every path under it, its kind, size and bytes (no link followed; only
    regular files are read, so a FIFO inside never blocks)."""
    d = Path(d)
    if not d.is_dir():
        return "missing"
    h = hashlib.sha256()
    n = size = 0
    for top, dirs, files in os.walk(d):
        dirs.sort()
        for name in sorted(files):
            p = Path(top) / name
            st = os.lstat(p)
            kind = st.st_mode & 0o170000
            h.update(f"{p.relative_to(d)}\0{kind}\0{st.st_size}\0".encode("utf-8", "surrogateescape"))
            if kind == 0o100000:
                h.update(file_sha256(p).encode())
            n, size = n + 1, size + st.st_size
    return {"sha256": h.hexdigest(), "files": n, "bytes": size}
