"""One build at a time per --out: `--out/.build/lock.json` names its holder (pid, host, start time, command).
A second build on that --out is refused naming the holder; the lock of a holder gone from this host (its pid
ended, or reused by a process started later) is taken over with one line. Taking and dropping the lock is
serialised by an flock on a guard file beside it, so two builds never both take over the same stale lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shlex
import socket
import sys
import time
from pathlib import Path

from ..boundary import Refused
from ..json_file import write_json
from . import state

LOCK_FILE = "lock.json"
GUARD_FILE = "lock.guard"
GUARD_WAIT_S = 30.0  # the guard is held for a read and a write; longer means a stuck file system


def lock_path(out: Path) -> Path:
    return Path(out) / state.STATE_DIR / LOCK_FILE


def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), telling a reused pid from its first owner."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
        return text.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def me(command: str | None = None) -> dict:
    pid = os.getpid()
    cmd = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": cmd,
        "proc_start": _proc_start(pid),
        "token": secrets.token_hex(8),
    }


def alive(holder: dict) -> bool:
    """Whether the holder (on this host) still runs."""
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = _proc_start(int(holder["pid"]))
    return holder.get("proc_start") is None or now is None or now == holder.get("proc_start")


def _read(path: Path):
    """The holder, None when there is no lock, "unreadable" when the file is not a holder record."""
    if not os.path.lexists(path):
        return None
    if not path.is_file() or path.is_symlink():
        return "unreadable"
    try:
        rec = json.loads(path.read_bytes()[: 1 << 16])
    except (OSError, ValueError):
        return "unreadable"
    ok = isinstance(rec, dict) and isinstance(rec.get("pid"), int) and isinstance(rec.get("host"), str)
    return rec if ok else "unreadable"


@contextlib.contextmanager
def _guard(out: Path):
    fd = os.open(Path(out) / state.STATE_DIR / GUARD_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > GUARD_WAIT_S:
                    raise Refused(
                        f"--out {out}: its lock guard {GUARD_FILE} stayed held for {GUARD_WAIT_S:g} s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def holder_text(h: dict) -> str:
    cmd = str(h.get("command", "?"))
    cmd = cmd if len(cmd) <= 160 else cmd[:157] + "..."
    return f"pid {h['pid']} on {h['host']} since {h.get('started', '?')}: {cmd}"


def acquire(out: Path, say, command: str | None = None) -> dict:
    path = lock_path(out)
    mine = me(command)
    with _guard(out):
        held = _read(path)
        if held == "unreadable":
            say(f"--out {out}: its lock file {path} is unreadable; taken over")
            state.remove(path)  # a folder in its place would make the rename fail on every run
        elif held is not None:
            if held["host"] != mine["host"]:
                raise Refused(
                    f"--out {out}: in use by the build of {holder_text(held)}; if it no longer runs, delete {path}"
                )
            if alive(held):
                raise Refused(
                    f"--out {out}: in use by the build of {holder_text(held)}; wait for it or give another --out"
                )
            say(f"--out {out}: taking over the lock of the build that is gone ({holder_text(held)})")
        write_json(path, mine)
    return mine


def release(out: Path, mine: dict) -> None:
    path = lock_path(out)
    with _guard(out):
        held = _read(path)
        if isinstance(held, dict) and all(held.get(k) == mine[k] for k in ("pid", "host", "token")):
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def held(out: Path, say, command: str | None = None):
    mine = acquire(out, say, command)
    try:
        yield mine
    finally:
        release(out, mine)
