"""Ctrl-C and SIGTERM during a long command: one line, exit 130, and the command's own cleanup.

    with interruptible() as stop:
        ...
    if stop.received: ...      # an interrupt arrived, whatever the library turned it into

In this process both signals raise KeyboardInterrupt, so `finally` blocks run (a temporary --out, a working
folder) as for Ctrl-C; SIGTERM's default would kill the process with none of them. Worker processes forked
meanwhile inherit the handler: there a signal ends the process quietly, since this process reports the
interrupt, not every child with a traceback of its own (data-loader workers ignore it: training/workers.py).
The same signal sent again soon after (torchrun sends SIGINT then SIGTERM; a terminal signals the whole
group) is ignored, so the cleanup it would cut short runs to its end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from .common import prog

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_GRACE_S = 10.0  # after the first signal, how long later ones are ignored while the cleanup runs


class Interrupt:
    received: int | None = None  # the signal number, once one arrived
    at: float = 0.0  # when (time.monotonic())


@contextlib.contextmanager
def interruptible():
    stop = Interrupt()
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield stop
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        now = time.monotonic()
        if stop.received is not None and now - stop.at < REPEAT_GRACE_S:
            return
        stop.received, stop.at = signum, now
        raise KeyboardInterrupt

    old = {s: signal.signal(s, handler) for s in _SIGNALS}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def interrupted_line(tool: str, what: str) -> str:

    return f"{prog(tool)}: interrupted; {what}"
