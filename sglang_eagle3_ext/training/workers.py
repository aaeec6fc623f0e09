"""DataLoader worker processes around an interrupt.

A Ctrl-C in a terminal (or `kill` of a process group, or torchrun) signals the workers as well as the training
process. A worker that dies of it makes torch raise "DataLoader worker ... killed by signal" in the training
process at whatever line it is running, cleanup included (a worker still starting prints its own
traceback), and a worker that outlives the run keeps reading files its working folder no longer has. So the
workers ignore both signals (`quiet_workers`; forked ones have them blocked from the start, `QuietLoader`):
they end when the training process stops them, or within seconds of it dying (torch's own watchdog); and the
run stops them (`stop_workers`) before its folders are removed. A spawned worker (speculators' loaders) is a
new interpreter that imports torch for seconds before any `worker_init_fn` runs; it starts with both signals
ignored (a disposition that survives exec, and Python installs no KeyboardInterrupt handler over it), so a
Ctrl-C then neither prints its traceback nor waits for it: a worker that has not ended within
`STOP_GRACE_S` of being told to is killed.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys

from torch.utils.data import DataLoader

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE_S = 0.5  # an idle worker ends within milliseconds of being told to; one still importing is killed


class QuietLoader(DataLoader):
    """A DataLoader whose workers start with SIGINT/SIGTERM blocked (forked) or ignored (spawned); this process
    takes them as before (one arriving while the workers start is held until they have started)."""

    def _get_iterator(self):
        if not self.num_workers:
            return super()._get_iterator()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            with _ignored_unless_pending():
                return super()._get_iterator()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


@contextlib.contextmanager
def _ignored_unless_pending():
    """Both signals ignored (they are blocked here, so one sent meanwhile is lost only in the instant the
    processes start), unless one is already pending: then it is delivered as soon as the mask is restored."""
    if set(_SIGNALS) & signal.sigpending():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in _SIGNALS}
    try:
        yield
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
