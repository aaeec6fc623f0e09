"""DataLoader worker processes around an interrupt.

A Ctrl-C in a terminal (or `kill` of a process group, or torchrun) signals the workers as well as the training
process. A worker that dies of it makes torch raise "DataLoader worker ... killed by signal" in the training
process at whatever line it is running, cleanup included (a worker still starting prints its own
traceback), and a worker that outlives the run keeps reading files its working folder no longer has. So the
workers ignore both signals (`quiet_workers`; forked ones have them blocked from the start, `QuietLoader`):
they end when the training process stops them, or within seconds of it dying (torch's own watchdog); and the
run stops and joins them (`stop_workers`) before its folders are removed. A spawned worker (speculators'
loaders) starts with a clear signal mask, so one signalled while it still imports torch ends with a traceback.
"""
from __future__ import annotations

import functools
import signal

from torch.utils.data import DataLoader

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class QuietLoader(DataLoader):
    """A DataLoader whose forked workers start with SIGINT/SIGTERM blocked; this process takes them as before."""

    def _get_iterator(self):
        if not self.num_workers:
            return super()._get_iterator()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            return super()._get_iterator()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _ignore_interrupts(inner, worker_id: int) -> None:
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if inner is not None:
        inner(worker_id)


def quiet_workers(worker_init_fn=None):
    """A DataLoader `worker_init_fn` (picklable, for spawned workers too): interrupts ignored, then `worker_init_fn`."""
    return functools.partial(_ignore_interrupts, worker_init_fn)


def stop_workers(*sources) -> None:
    """Stop and join the worker processes of DataLoaders (their persistent iterator) or DataLoader iterators;
    a worker already gone (killed with the training process's group) is not an error here."""
    from torch.utils.data import dataloader as dl
    from torch.utils.data import _utils

    for src in sources:
        it = getattr(src, "_iterator", src)
        if not isinstance(it, dl._MultiProcessingDataLoaderIter):
            continue
        if getattr(it, "_worker_pids_set", False):     # no "worker killed" error raised into this process
            _utils.signal_handling._remove_worker_pids(id(it))
            it._worker_pids_set = False
        try:
            it._shutdown_workers()
        except RuntimeError:
            pass
        if getattr(src, "_iterator", None) is it:
            src._iterator = None
