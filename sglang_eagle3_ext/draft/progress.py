"""A one-line progress counter on stderr for reads of draft weights that take long (value scans, convert)."""

from __future__ import annotations

import sys
import time


class ByteProgress:
    """Counts bytes read; says nothing for small totals. On a terminal: one line rewritten each second;
    elsewhere (a launcher's log): a line every 10 seconds."""

    def __init__(self, label: str, total_bytes: int, enabled: bool = True, min_bytes: int = 256 << 20, stream=None):
        self.label, self.total, self.done = label, total_bytes, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total_bytes > min_bytes
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = 1.0 if self.tty else 10.0
        self.t = time.monotonic()
        self.shown = False

    def add(self, n: int) -> None:
        self.done += n
        if not self.enabled or time.monotonic() - self.t < self.every:
            return
        self.t = time.monotonic()
        self.shown = True
        text = f"[{self.label}] {self.done / 2**30:.2f}/{self.total / 2**30:.2f} GiB"
        print(f"\r{text}" if self.tty else text, end="" if self.tty else "\n", file=self.stream, flush=True)

    def close(self) -> None:
        if self.enabled and self.shown and self.tty:
            print(file=self.stream)
