"""Ctrl-C and SIGTERM during long work in this process: the work's own cleanup runs, and no interrupt is lost.

    with interruptible("sglang-eagle3 train") as stop:
        ...
    if stop.received: ...      # an interrupt arrived, whatever the library turned it into

In this process both signals raise KeyboardInterrupt, so `finally` blocks run (a temporary --out, a working
folder) as for Ctrl-C; SIGTERM's default would kill the process with none of them. Worker processes forked
meanwhile inherit the handler: there a signal ends the process quietly, since this process reports the
interrupt, not every child with a traceback of its own (data-loader workers ignore it: training/workers.py).

An interrupt is never lost. Python runs a signal's handler at the next safe point of the main thread, which
may be inside a weakref callback, a `__del__`, a gc callback or a generator's close; a KeyboardInterrupt
raised there is swallowed ("Exception ignored in ..."). While `interruptible()` is active, such a swallowed
interrupt is delivered again (no "Exception ignored" lines), until it reaches the command's own code; one
still on its way when the block ends is raised as the block ends (never later, where no handler of the
command would catch it and Python would die by the signal).

The rule for repeats:
- a second signal (SIGINT or SIGTERM) within COALESCE_S of the first one's handling is the same request and
  is ignored: a terminal signals the whole process group, and torchrun or a parent tool forwards the signal
  it received to its children, so one keypress may arrive twice within milliseconds; the cleanup runs on;
- a signal later than that is the user asking again: the process ends at once, one line, exit 130, without
  the rest of the cleanup (folders it would have removed, servers it would have stopped, may remain).
Signals that arrive while the main thread is stuck in one C call are one signal to Python, seen when the call
returns (a full garbage collection of a large heap is one such call: seconds on a loaded machine).
A process that has reported its interrupt and leaves with 130 calls `exit_at_once_on_interrupt()`: a signal
then ends it with the same code, never with a traceback and a death by the signal after its last line.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
COMMAND = "sglang-eagle3"
EXIT_INTERRUPTED = 130  # the exit code of an interrupted command (cli/common.py lists them all)
COALESCE_S = 1.0  # a repeat this soon after the first signal is the same request (group or forwarded delivery)


class Interrupt:
    received: int | None = None  # the signal number, once one arrived
    at: float = 0.0  # when its handler first ran (time.monotonic())


@contextlib.contextmanager
def interruptible(name: str = COMMAND):
    """Both signals raise KeyboardInterrupt inside; `name` (the command) starts the line a second one prints."""
    stop = Interrupt()
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield stop
        return
    owner = os.getpid()
    raised: list[BaseException | None] = [None]  # the KeyboardInterrupt the handler raised last
    again = [False]  # that one was swallowed: the next call is its delivery, not a repeat
    delivery = _Delivery()

    def handler(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        if delivery.closed:  # the block is ending: what is owed is raised there, once
            return
        if again[0]:  # the first request, delivered again: its time stays that of its first handling
            again[0] = False
        elif stop.received is None:
            stop.received, stop.at = signum, time.monotonic()
        elif time.monotonic() - stop.at < COALESCE_S:
            return
        else:
            _end_now(name)
        raised[0] = exc = KeyboardInterrupt()
        raise exc

    def unraisable(u, previous=sys.unraisablehook):
        if u.exc_value is None or u.exc_value is not raised[0]:
            try:
                previous(u)
                return
            except KeyboardInterrupt as e:  # the handler ran inside the hook that reports another error
                if e is not raised[0]:
                    raise
        raised[0], again[0] = None, True
        delivery.later(stop.received or signal.SIGINT, unraisable.__code__)

    old = {s: signal.signal(s, handler) for s in _SIGNALS}
    old_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    ended_by_error = True
    try:
        yield stop
        ended_by_error = False
    finally:
        owed = delivery.close() or again[0]
        _safe_point()  # a signal already simulated runs the quiet handler here, not the one restored below
        if sys.unraisablehook is unraisable:
            sys.unraisablehook = old_hook
        for s, h in old.items():
            signal.signal(s, h)
        if owed and not ended_by_error:
            raise KeyboardInterrupt  # the swallowed interrupt, delivered as the block ends


def _safe_point() -> None:
    """A Python call: the interpreter runs pending signal handlers at its start."""


class _Delivery:
    """A swallowed interrupt raised again: the handler runs again at the main thread's next safe point once the
    main thread has left the hook that swallowed it (run there, it would raise into the hook, which Python
    swallows too). A thread waits for that, since any call the hook itself made after the signal is set would
    run the handler at once. Once the block ends (`close`), no thread simulates a signal any more: one that had
    not yet done so is owed, and the block raises it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.closed = False
        self.waiting = 0  # threads that have not yet simulated their signal

    def later(self, signum: int, hook) -> None:
        main = threading.main_thread().ident

        def in_hook() -> bool:
            f = sys._current_frames().get(main)
            while f is not None and f.f_code is not hook:
                f = f.f_back
            return f is not None

        def deliver() -> None:
            while in_hook() and not self.closed:
                time.sleep(0.0005)
            with self.lock:
                if not self.closed:
                    self.waiting -= 1
                    _thread.interrupt_main(signum)

        with self.lock:
            self.waiting += 1
        _thread.start_new_thread(deliver, ())

    def close(self) -> bool:
        """True when an interrupt is still owed (a thread had not yet simulated it). Closed before the lock is
        taken: waiting for it runs signal handlers (a thread may simulate one meanwhile), and the handler must
        not raise into the block's cleanup, which would leave the block's handlers installed."""
        self.closed = True
        with self.lock:
            return self.waiting > 0


def _end_now(name: str) -> None:
    """The user's second interrupt: one line and exit 130 at once. Written to the file descriptor: the handler
    may be running inside a write to sys.stderr."""
    os.write(2, f"{name}: interrupted again; stopped at once, before its cleanup finished\n".encode())
    os._exit(EXIT_INTERRUPTED)


def exit_at_once_on_interrupt() -> None:
    """For a process that has reported its interrupt and is leaving with 130: an interrupt from now on (one still
    on its way, or the user's next Ctrl-C while Python shuts down) ends it at once with the same code. Python's
    own handler would raise it where nothing catches it any more: a traceback, then death by the signal."""
    if threading.current_thread() is threading.main_thread():
        for s in _SIGNALS:
            signal.signal(s, lambda signum, frame: os._exit(EXIT_INTERRUPTED))
