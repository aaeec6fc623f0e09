"""Which dump samples earlier refreshes used, and which draft used them: `refresh_cursor.json` in the dump dir.

The cursor is a journal written atomically (a temporary file renamed over it) in this order:
1. `begin` — before --out is written: the refresh under way (`pending`: its --out, its new draft, the samples
   it trains on and holds out, the server it swaps into). Nothing is used yet.
2. `finish` — once the refresh's draft is served (with --swap: the server reports serving it; without: it is
   accepted and --out is complete), the pending samples move into `used` under that draft; otherwise they stay
   unused. Either way the refresh goes into `refreshes` and `pending` is cleared.
A refresh that stops between the two (a crash, a kill) leaves `pending`; the next refresh settles it first from
what --out and the server show (refresh/settle.py), so every sample is used exactly once or not at all. Held-out
samples are recorded as held out (judged on, never trained): a sample's side is fixed by its id, so it would be
held out again.

One refresh at a time per dump dir: the cursor's lock file is held for the whole run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from ..boundary import BadInput, Refused, check_type, field, list_of, read_json_file
from ..dump.sample_file import write_json_atomic

CURSOR_FILE = "refresh_cursor.json"
LOCK_FILE = "refresh_cursor.lock"
FORMAT = "sglang-eagle3-refresh-cursor"
VERSION = 2
_READS = (1, 2)


@dataclasses.dataclass
class Cursor:
    path: Path
    used: list = dataclasses.field(default_factory=list)  # {"draft", "out", "trained": [ids], "heldout": [ids]}
    history: list = dataclasses.field(default_factory=list)  # one entry per refresh that got as far as a verdict
    pending: dict | None = None  # the refresh under way (see the module's doc)

    @property
    def consumed(self) -> set:
        """Every sample an earlier refresh used: trained on or held out."""
        return {i for u in self.used for part in ("trained", "heldout") for i in u[part]}

    @property
    def heldout(self) -> set:
        return {i for u in self.used for i in u["heldout"]}

    def begin(self, pending: dict) -> None:
        """Record the refresh under way (its samples are not used yet)."""
        self.pending = dict(pending)
        self._write()

    def finish(self, entry: dict, used: bool) -> None:
        """Settle the pending refresh: its samples used by its draft when `used`, else left for the next one."""
        p = self.pending or {}
        if used:
            self.used.append(
                {
                    "draft": p.get("draft"),
                    "out": p.get("out"),
                    "trained": list(p.get("trained", [])),
                    "heldout": list(p.get("heldout", [])),
                }
            )
        self.history.append({**entry, "used": bool(used)})
        self.pending = None
        self._write()

    def advance(self, ids, entry: dict) -> None:
        """Mark `ids` trained on (when `entry['accepted']`) in one step, and record `entry`."""
        self.pending = {"draft": entry.get("draft"), "out": entry.get("out"), "trained": list(ids), "heldout": []}
        self.finish(entry, bool(entry.get("accepted")))

    def _write(self) -> None:

        write_json_atomic(
            self.path,
            {
                "format": FORMAT,
                "version": VERSION,
                "used": self.used,
                "refreshes": self.history,
                "pending": self.pending,
            },
        )


def _ids(doc: dict, key: str, where: str) -> list:
    return list_of(field(doc, key, list, where), str, f"{where}: {key!r}")


def _path_or_none(doc: dict, key: str, where: str):
    return field(doc, key, str, where, optional=True)


def _samples(doc, where: str) -> dict:
    check_type(doc, dict, where)
    return {
        "draft": _path_or_none(doc, "draft", where),
        "out": _path_or_none(doc, "out", where),
        "trained": _ids(doc, "trained", where),
        "heldout": _ids(doc, "heldout", where),
    }


def _parse(doc, where: str) -> tuple[list, list, dict | None]:
    check_type(doc, dict, where)
    if doc.get("format") != FORMAT or doc.get("version") not in _READS:
        raise BadInput(
            where,
            f"not a refresh cursor of version {VERSION} (format {doc.get('format')!r}, version {doc.get('version')!r})",
        )
    history = field(doc, "refreshes", list, where)
    if doc["version"] == 1:  # one set of samples, no draft named
        return [{"draft": None, "out": None, "trained": _ids(doc, "consumed", where), "heldout": []}], history, None
    used = [_samples(u, f"{where}: 'used'[{i}]") for i, u in enumerate(field(doc, "used", list, where))]
    pending = doc.get("pending")
    if pending is not None:
        at = f"{where}: 'pending'"
        pending = {
            **_samples(pending, at),
            "id": field(pending, "id", str, at, optional=True),
            "swap_url": field(pending, "swap_url", str, at, optional=True),
        }
        if pending["out"] is None:
            raise BadInput(f"{where}: 'pending'", "names no 'out'")
    return used, history, pending


def read_cursor(dump_dir) -> Cursor:
    """The cursor of `dump_dir` (empty when no refresh ran yet); Refused naming the file when it is not one."""
    path = Path(dump_dir) / CURSOR_FILE
    if not path.exists():
        return Cursor(path)
    try:
        used, history, pending = _parse(read_json_file(path, "refresh cursor"), str(path))
    except BadInput as e:
        raise Refused(
            f"{e}; it records which samples earlier refreshes used: repair it, or move it away to let "
            f"the next refresh use every sample of the dump"
        ) from None
    return Cursor(path, used, list(history), pending)


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
