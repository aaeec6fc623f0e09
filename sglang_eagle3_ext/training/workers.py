"""DataLoader worker processes around an interrupt.

A Ctrl-C in a terminal (or `kill` of a process group, or torchrun) signals the workers as well as the training
process. A worker that dies of it makes torch raise "DataLoader worker ... killed by signal" in the training
process at whatever line it is running, cleanup included (a worker still starting prints its own
traceback), and a worker that outlives the run keeps reading files its working folder no longer has. So the
workers ignore both signals (`quiet_workers`; they start with them blocked, `QuietLoader`): they end when
the training process stops them, or within seconds of it dying (torch's own watchdog); and the run stops them
(`stop_workers`) before its folders are removed. A spawned worker (speculators' loaders) is a new interpreter
that imports torch for seconds before any `worker_init_fn` runs; it starts with both signals blocked (a mask
that survives fork and exec, and that Python's start-up leaves alone), so a Ctrl-C then neither prints its
traceback nor waits for it: a worker that has not ended within `STOP_GRACE_S` of being told to is killed.
The training process never ignores the signals meanwhile (an ignored signal is discarded, and the Ctrl-C
lost): one that arrives while its workers start is raised once they have started, and stopped.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading

from torch.utils.data import DataLoader

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE_S = 0.5  # an idle worker ends within milliseconds of being told to; one still importing is killed


class QuietLoader(DataLoader):
    """A DataLoader whose workers start with SIGINT/SIGTERM blocked (forked or spawned: the mask survives fork and
    exec); this process takes a signal that arrives while they start once they have started."""

    def _get_iterator(self):
        if not self.num_workers or threading.current_thread() is not threading.main_thread():
            return super()._get_iterator()
        _start_resource_tracker(self.multiprocessing_context)
        held: list[int] = []
        it = None
        try:
            with _held(held):
                it = super()._get_iterator()
        finally:
            if held:  # its workers stopped first: the interrupt leaves no worker behind that no one stops
                if it is not None:
                    stop_workers(it)
                signal.raise_signal(held[0])
        return it


def _start_resource_tracker(context) -> None:
    """multiprocessing starts its resource tracker with the first spawned process, and unblocks both signals in
    this thread as it does: started before they are blocked, it leaves the mask alone."""
    import multiprocessing
    from multiprocessing import resource_tracker

    ctx = multiprocessing.get_context(context) if isinstance(context, str) else context
    if (ctx or multiprocessing.get_context()).get_start_method() != "fork":
        resource_tracker.ensure_running()


@contextlib.contextmanager
def _held(held: list[int]):
    """Both signals blocked in this thread and recorded (not raised) if another thread takes one: those recorded
    or pending meanwhile are in `held` once the handlers are back. Never ignored: a signal that arrives then is
    not lost."""
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in _SIGNALS}
    try:
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a pending one reaches the recorder now
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _ignore_interrupts(inner, worker_id: int) -> None:
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    sys.excepthook = functools.partial(_quiet_when_the_reader_left, sys.excepthook)
    if inner is not None:
        inner(worker_id)


def _quiet_when_the_reader_left(hook, kind, value, tb) -> None:
    """A worker hands a batch's tensors over a connection the training process opens (multiprocessing's
    resource sharer, whose thread reports its errors here); an interrupt there cuts the handshake short, and
    the training process reports the interrupt. Any other error is reported as before."""
    if not issubclass(kind, (ConnectionError, EOFError)):
        hook(kind, value, tb)


def quiet_workers(worker_init_fn=None):
    """A DataLoader `worker_init_fn` (picklable, for spawned workers too): interrupts ignored, then `worker_init_fn`."""
    return functools.partial(_ignore_interrupts, worker_init_fn)


def stop_workers(*sources) -> None:
    """Stop and join the worker processes of DataLoaders (their persistent iterator) or DataLoader iterators;
    a worker already gone (killed with the training process's group) is not an error here."""
    from torch.utils.data import _utils
    from torch.utils.data import dataloader as dl

    for src in sources:
        it = getattr(src, "_iterator", src)
        if not isinstance(it, dl._MultiProcessingDataLoaderIter):
            continue
        if getattr(it, "_worker_pids_set", False):  # no "worker killed" error raised into this process
            _utils.signal_handling._remove_worker_pids(id(it))
            it._worker_pids_set = False
        grace, _utils.MP_STATUS_CHECK_INTERVAL = _utils.MP_STATUS_CHECK_INTERVAL, STOP_GRACE_S
        try:  # torch joins each worker for MP_STATUS_CHECK_INTERVAL (5 s), then sends the ignored SIGTERM
            it._shutdown_workers()
        except RuntimeError:
            pass
        finally:
            _utils.MP_STATUS_CHECK_INTERVAL = grace
        for w in getattr(it, "_workers", ()):
            if w.is_alive():
                w.kill()
                w.join(timeout=STOP_GRACE_S)
        if getattr(src, "_iterator", None) is it:
            src._iterator = None
