"""Which dump samples earlier refreshes already trained on: `refresh_cursor.json` in the dump dir.

A refresh reads only samples the cursor does not hold, and adds them once its new draft is accepted, so a run
that stops half-way (or whose draft is not better) leaves them for the next run. One refresh at a time per dump
dir: the cursor's lock file is held for the whole run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from ..boundary import BadInput, Refused, check_type, field, list_of, read_json_file

CURSOR_FILE = "refresh_cursor.json"
LOCK_FILE = "refresh_cursor.lock"
FORMAT = "sglang-eagle3-refresh-cursor"
VERSION = 1


@dataclasses.dataclass
class Cursor:
    path: Path
    consumed: set = dataclasses.field(default_factory=set)   # sample ids earlier accepted refreshes trained on
    history: list = dataclasses.field(default_factory=list)   # one entry per refresh that got as far as a verdict

    def advance(self, ids, entry: dict) -> None:
        """Mark `ids` used (when `entry['accepted']`), record `entry`, write the file atomically."""
        if entry.get("accepted"):
            self.consumed |= set(ids)
        self.history.append(entry)
        from ..dump.sample_file import write_json_atomic

        write_json_atomic(self.path, {"format": FORMAT, "version": VERSION, "consumed": sorted(self.consumed),
                                      "refreshes": self.history})


def read_cursor(dump_dir) -> Cursor:
    """The cursor of `dump_dir` (empty when no refresh ran yet); Refused naming the file when it is not one."""
    path = Path(dump_dir) / CURSOR_FILE
    if not path.exists():
        return Cursor(path)
    try:
        doc = check_type(read_json_file(path, "refresh cursor"), dict, str(path))
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise BadInput(str(path), f"not a refresh cursor of version {VERSION} (format {doc.get('format')!r}, "
                                      f"version {doc.get('version')!r})")
        consumed = list_of(field(doc, "consumed", list, str(path)), str, f"{path}: 'consumed'")
        history = field(doc, "refreshes", list, str(path))
    except BadInput as e:
        raise Refused(f"{e}; it records which samples earlier refreshes used: repair it, or move it away to let "
                      f"the next refresh use every sample of the dump") from None
    return Cursor(path, set(consumed), list(history))


@contextlib.contextmanager
def exclusive(dump_dir):
    """Held while a refresh runs: a second refresh of the same dump dir is refused, naming the first's pid."""
    import fcntl

    lock = Path(dump_dir) / LOCK_FILE
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise Refused(f"another refresh of {dump_dir} is running (pid {other}); wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
