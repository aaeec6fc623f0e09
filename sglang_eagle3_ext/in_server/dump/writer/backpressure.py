"""What the capture calls on the forward thread, common to both writers: the host-memory budget that makes
the forward pass wait for the writer (backpressure, never a drop), and the release of a batch's memory.

No wait is unbounded: the forward thread waits at most STALL_S without any held byte coming back (stuck
storage, a lost progress message of the writer process), then the writer stops dumping and serving goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar, Protocol

from ...._log import log_once

if TYPE_CHECKING:
    from ....dump.config import DumpConfig
    from ..assemble import ChunkBatch
    from ..staging import PinnedRing

STALL_S = 120.0  # the forward thread waited this long and no host memory came back: the writer is stuck


class Budget:
    """Bytes of host memory held by in-flight batches. acquire() waits while that would exceed the cap
    *and* waiting can help (some held bytes belong to work that will finish); bytes parked in
    half-stitched requests cannot be freed by waiting, so then it overshoots (logged) instead of deadlocking."""

    def __init__(self, cap: int, progress_possible, stall_s: float = STALL_S):
        self.cap, self.used = cap, 0
        self._progress_possible = progress_possible
        self.stall_s = stall_s
        self._cond = threading.Condition()
        self.waited_s = 0.0

    def acquire(self, n: int) -> bool:
        """False (nothing taken) when the wait stalled: stall_s without any byte coming back."""
        with self._cond:
            t0 = None
            while self.used and self.used + n > self.cap and self._progress_possible():
                now = time.monotonic()
                if t0 is None:
                    t0 = last_progress = now
                    seen = self.used
                    log_once(
                        "dump.backpressure",
                        "dump writer is behind: the forward pass waits for the writer "
                        "(host budget %d MB full); raise SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB or use faster "
                        "storage",
                        self.cap >> 20,
                        level=logging.WARNING,
                    )
                elif self.used < seen:
                    seen, last_progress = self.used, now
                elif now - last_progress >= self.stall_s:
                    self.waited_s += now - t0
                    return False
                self._cond.wait(min(0.5, self.stall_s))
            if t0 is not None:
                self.waited_s += time.monotonic() - t0
            if self.used + n > self.cap and self.used:
                log_once(
                    "dump.overshoot",
                    "dump host budget exceeded by partially stitched requests "
                    "(%d + %d > %d bytes); continuing rather than deadlocking",
                    self.used,
                    n,
                    self.cap,
                    level=logging.WARNING,
                )
            self.used += n
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()

    def poke(self) -> None:
        with self._cond:
            self._cond.notify_all()


class ForwardThreadApi(Protocol):
    """What the capture (capture.py, verify_capture.py) calls on the forward thread. Both writers subclass it
    explicitly (thread.DumpWriter in this process, process.ProcessDumpWriter for a child process) and
    inherit the budget handling below; each implements the abstract methods."""

    cfg: DumpConfig  # the dump's settings (its sample rate decides which requests are dumped)
    done_ids: set[str]  # sample ids already in the manifest: not copied again
    budget: Budget  # host memory held by batches in flight
    accepting: bool  # False once dumping stopped (serving goes on)
    stop_reason: str | None
    stats: dict  # the counters of the status file
    staging: PinnedRing | None  # the ring the capture copies into; None: host_buffers() per batch
    checks_finite_off_gil: ClassVar[bool] = False  # True: the NaN/Inf check costs the forward thread nothing

    @abstractmethod
    def host_buffers(self, specs: dict, cuda: bool) -> dict:
        """{name: empty host tensor} per (shape, dtype), for a batch the staging ring has no room for."""

    @abstractmethod
    def submit(self, batch: ChunkBatch) -> None:
        """Hand over a batch whose device->host copies were queued (its copy event says when they landed)."""

    @abstractmethod
    def stop_stalled(self, reason: str) -> None:
        """The forward thread gave up waiting for host memory (reserve): stop dumping."""

    @abstractmethod
    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every submitted batch is stitched and every complete sample written."""

    @abstractmethod
    def close(self, timeout: float = 60.0) -> None:
        """Flush, then stop the writer's threads (and process)."""

    def is_done(self, sample_id: str) -> bool:
        """Nothing (more) to dump for this id: in the manifest already, or outside the dump's sample. The one
        decision the capture and both writers' assemblers ask (a writer process's child has the same cfg)."""
        return sample_id in self.done_ids or not self.cfg.wanted(sample_id)

    def reserve(self, nbytes: int) -> bool:
        """Backpressure: may block the forward thread until host memory is free; never drops. False (and
        dumping stopped) when the writer made no progress for STALL_S: serving must not hang on the dump."""
        if self.budget.acquire(nbytes):
            return True
        self.stop_stalled(
            f"the writer released no host memory for {self.budget.stall_s:.0f} s while the forward "
            f"pass waited for {nbytes} bytes ({self.budget.used} held; stuck storage?)"
        )
        return False

    def unreserve(self, nbytes: int) -> None:
        self.budget.release(nbytes)

    def release_host(self, batch: ChunkBatch) -> None:
        """Nothing holds the batch's host copies any more: their staging region and budget go back (once)."""
        if batch.free_host is not None:
            batch.free_host()
            batch.free_host = None
        self.budget.release(batch.nbytes)
