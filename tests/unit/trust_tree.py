"""A directory tree as data, to prove a command left every file it was not asked to write as it was."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def snapshot(root) -> dict:
    """Every entry under root (symlinks not followed, FIFOs not opened): files by content, links by target."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d) / name
            rel = str(p.relative_to(root))
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(mode):
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("special", stat.S_IFMT(mode))
    return out


def user_folder(p: Path) -> Path:
    """A folder holding a user's files (one named like a model's own)."""
    p.mkdir(parents=True)
    (p / "notes.txt").write_text("a user's file")
    (p / "config.json").write_text('{"mine": true}')
    return p
