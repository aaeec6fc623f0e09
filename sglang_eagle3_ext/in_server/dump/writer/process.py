"""The dump writer in a process of its own (SGLANG_EAGLE3_EXT_DUMP_WRITER=process).

Why: the thread writer's io threads share the scheduler's GIL. Each of their torch calls and syscalls
(dozens per sample) hands the GIL back and forth with the forward thread, and on a launch-bound model
that is prefill time lost. With this writer the scheduler process keeps only
  forward thread:   reserve + asynchronous copies into a shared staging ring + submit (as before)
  forwarder thread: wait for a batch's copy event, send its layout (offsets, shapes, rids; ~1 KB)
  reader thread:    the child's replies (batch memory free, sample written, stopped)
while the child (child.py) maps the same memory and runs the ordinary DumpWriter there:
stitching, checks, atomic files, manifest, status file.

Host memory: one memfd of SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB, page-locked (cudaHostRegister) on a
CUDA model. A batch that finds no contiguous room gets a memfd of its own, passed over the socket.
A child that dies stops dumping (serving continues, every held byte is released); when the server
dies the child sees the socket close, lets the files being written finish and exits.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from multiprocessing.reduction import sendfds

from .... import envs
from ...._log import log_once, logger
from ....dump.manifest import read_manifest
from ....patch_table import ENV_ENABLE
from ..staging import PinnedRing, SharedMemory, region_size
from . import messages as m
from .backpressure import Budget, ForwardThreadApi
from .thread import validate_dump_root

START_TIMEOUT_S = 300


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


class ProcessDumpWriter(ForwardThreadApi):
    """The scheduler-process side: DumpWriter's interface to the capture, the writing done by a child."""

    checks_finite_off_gil = True  # the child checks each sample for NaN/Inf: no flag kernels on the forward

    def __init__(self, cfg, meta: dict, name: str = "dp0", pin: bool = False):
        """pin: page-lock the shared staging memory (a CUDA model: asynchronous device->host copies)."""

        self.cfg, self.name = cfg, name
        self.root = validate_dump_root(cfg.dump_dir)
        self.done_ids: set[str] = set(read_manifest(self.root))
        self.accepting, self.stop_reason = True, None
        self.stats: dict = {}
        self._mem = SharedMemory(cfg.max_pending_bytes, f"sge3-dump-{name}")
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._inflight: dict[int, tuple] = {}  # batch id -> (ChunkBatch, its own segments)
        self._segments: list[SharedMemory] = []  # fallback memory handed out, not yet sent
        self._q: queue.Queue = queue.Queue()
        self._next = self._sent = self._child_received = self._child_busy = 0
        self._waiters: dict[int, list] = {}  # flush token -> [event, reply]
        self._closing = False
        self._closed = False
        self.budget = Budget(cfg.max_pending_bytes, self._progress_possible)
        ours, theirs = socket.socketpair()
        env = {k: v for k, v in envs.environ().items() if k != ENV_ENABLE}  # no SGLang patches in the child
        env["CUDA_VISIBLE_DEVICES"] = ""  # and no CUDA context
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sglang_eagle3_ext.in_server.dump.writer.child",
                str(theirs.fileno()),
                str(self._mem.fd),
                str(self._mem.nbytes),
                name,
            ],
            pass_fds=(theirs.fileno(), self._mem.fd),
            env=env,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._sock = ours
        self._conn = Connection(os.dup(ours.fileno()))
        self._send(m.Start(dataclasses.asdict(cfg), dict(meta)))
        reply = (
            self._conn.recv()
            if self._conn.poll(START_TIMEOUT_S)
            else m.StartFailed(f"no answer in {START_TIMEOUT_S} s")
        )
        if not isinstance(reply, m.Ready):
            from .thread import DumpStartupError

            self._proc.kill()
            raise DumpStartupError(f"the dump writer process did not start: {reply.error}")
        self.staging = self._open_staging(pin)
        logger.info(
            "dump: writing from a separate process (pid %d; SGLANG_EAGLE3_EXT_DUMP_WRITER=process): the "
            "scheduler's GIL is not shared with the file io",
            self._proc.pid,
        )
        self._reader = threading.Thread(target=self._read_loop, name="sge3-dump-reader", daemon=True)
        self._forwarder = threading.Thread(target=self._forward_loop, name="sge3-dump-forwarder", daemon=True)
        self._reader.start()
        self._forwarder.start()

    # ---- capture API (ForwardThreadApi) -----------------------------------------------------------
    def _open_staging(self, pin: bool) -> PinnedRing:
        """The ring the capture copies into: the shared memory, page-locked for a CUDA model."""
        if pin:
            try:
                self._mem.pin()
            except Exception as e:  # noqa: BLE001 - slower (synchronous copies), still correct
                log_once(
                    "dump.pin",
                    "dump: could not page-lock the %d MB shared staging buffer (%s): device->host "
                    "copies will be synchronous",
                    self._mem.nbytes >> 20,
                    e,
                    level=logging.WARNING,
                )
        log_once(
            "dump.ring",
            "dump: %s a %d MB host staging buffer for the device->host copies, shared with the "
            "writer process (SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB)",
            "pinned" if self._mem.pinned else "mapped",
            self._mem.nbytes >> 20,
        )
        return PinnedRing(self._mem.nbytes, buf=self._mem.buf)

    def host_buffers(self, specs: dict, cuda: bool) -> dict:
        """A batch the ring has no room for: its own shared memory (pageable: copies into it are synchronous)."""
        log_once(
            "dump.segment",
            "dump: the shared staging buffer has no contiguous room for a batch; such batches "
            "get their own shared memory (their copies are synchronous). Said once; a larger "
            "SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB avoids it",
        )
        seg = SharedMemory(region_size(specs.values()), f"sge3-dump-{self.name}-seg")
        with self._lock:
            self._segments.append(seg)
        whole = PinnedRing(seg.nbytes, buf=seg.buf)  # laid out as a ring region would be
        return dict(zip(specs, whole.tensors(whole.alloc(seg.nbytes), specs.values())))

    def submit(self, batch) -> None:
        self._q.put(batch)

    def stop_stalled(self, reason: str) -> None:
        """The forward thread gave up waiting (ForwardThreadApi.reserve): stop here and in the child."""
        if not self.accepting:
            return
        self.accepting, self.stop_reason = False, f"TimeoutError: {reason}"
        logger.error(
            "dump: STOPPED writing (%s); serving continues; the manifest lists only complete samples.", self.stop_reason
        )
        self._send(m.Stop(reason))

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every submitted batch is stitched and every complete sample written (in the child)."""
        ev = threading.Event()
        with self._lock:
            token = self._next = self._next + 1
            self._waiters[token] = [ev, None]
        self._q.put(m.Flush(token, timeout))
        ok = ev.wait(timeout + 10)
        with self._lock:
            _, reply = self._waiters.pop(token)
        return bool(ok and reply)

    def close(self, timeout: float = 60.0) -> None:
        if self._closed:  # a second close: the forwarder that would answer its flush has gone
            return
        self._closed = self._closing = True
        self.flush(timeout)
        self._q.put(None)
        self._forwarder.join(timeout)
        self._reader.join(timeout)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._release_all()

    # ---- background -------------------------------------------------------------------------------
    def _progress_possible(self) -> bool:
        """Waiting frees host memory only while the child has work that ends in a release; bytes parked in
        half-stitched requests do not (then the budget overshoots instead of deadlocking, as in-process)."""
        return (not self._q.empty() or self._child_received < self._sent or self._child_busy > 0) and self.accepting

    def _send(self, msg, fds=()) -> bool:
        with self._send_lock:
            try:
                self._conn.send(msg)
                if fds:
                    sendfds(self._sock, list(fds))
                return True
            except OSError:
                return False

    def _forward_loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._send(m.Close())
                return
            if isinstance(item, m.Flush):  # in order with the batches
                if not self._send(item):
                    self._answer(item.token, False)
                continue
            batch = item
            try:
                batch.wait()  # the copies landed: the child may read the memory
                with self._lock:
                    bid = self._next = self._next + 1
                desc, segs = self._describe(batch, bid)
            except Exception as e:  # noqa: BLE001 - one batch lost, said; serving goes on
                logger.error("dump: could not hand a batch to the writer process: %s: %s", type(e).__name__, e)
                self._release_with(batch, ())
                continue
            with self._lock:
                self._inflight[bid] = (batch, segs)
                self._sent += 1
            if not self.accepting or not self._send(desc, [s.fd for s in segs]):
                with self._lock:
                    self._inflight.pop(bid, None)
                self._release_with(batch, segs)

    def _describe(self, batch, bid: int) -> tuple[m.Batch, list[SharedMemory]]:
        """The batch as plain data: where each host tensor lives (ring offset or one of its segments)."""
        segs, fields = [], {}
        with self._lock:
            pool = list(self._segments)
        for k in m.FIELDS:
            t = getattr(batch, k)
            if t is None or not hasattr(t, "data_ptr"):
                fields[k] = None if t is None else [int(x) for x in t]
                continue
            shape, dtype = tuple(t.shape), _dtype_name(t.dtype)
            offset = self._mem.contains(t)
            if offset is not None:
                fields[k] = m.HostTensor(offset, shape, dtype)
                continue
            seg = next((s for s in pool if s.contains(t) is not None), None)
            if seg is None:
                raise RuntimeError(f"host tensor {k} is not in the shared memory")
            if seg not in segs:
                segs.append(seg)
            fields[k] = m.HostTensor(seg.contains(t), shape, dtype, segs.index(seg), seg.nbytes)
        if segs:
            with self._lock:
                self._segments = [s for s in self._segments if s not in segs]
        norm = None
        if batch.norm is not None:
            w, eps = batch.norm
            norm = m.Norm(w.float().numpy().tobytes(), tuple(w.shape), _dtype_name(w.dtype), eps)
        return m.Batch(
            bid, batch.rids, batch.prefix_lens, batch.extend_lens, batch.aux_layout, batch.nbytes, fields, norm
        ), segs

    def _read_loop(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(msg, m.Freed):
                with self._lock:
                    batch, segs = self._inflight.pop(msg.batch_id, (None, ()))
                if batch is not None:
                    self._release_with(batch, segs)
            elif isinstance(msg, m.Written):
                self.done_ids.add(msg.sample_id)
            elif isinstance(msg, m.Busy):
                self._child_received, self._child_busy = msg.received, msg.busy
                self.budget.poke()
            elif isinstance(msg, m.Stopped):
                self.accepting, self.stop_reason = False, msg.reason
            elif isinstance(msg, m.Flushed):
                self.stats = msg.stats
                self._answer(msg.token, msg.ok)
            elif isinstance(msg, m.Closed):
                self.stats = msg.stats
        if not self._closing:
            rc = self._proc.poll()
            self.accepting = False
            self.stop_reason = f"the writer process exited (code {rc})"
            logger.error(
                "dump: STOPPED: %s; serving continues; the manifest lists only complete samples. Re-run "
                "the dump client after a restart to resume.",
                self.stop_reason,
            )
        self._release_all()

    def _answer(self, token: int, ok) -> None:
        with self._lock:
            w = self._waiters.get(token)
        if w is not None:
            w[1] = ok
            w[0].set()

    def _release_with(self, batch, segs) -> None:
        """The batch's ring region and budget (ForwardThreadApi.release_host), then its own segments."""
        self.release_host(batch)
        for s in segs:
            s.close()

    def _release_all(self) -> None:
        """Nothing will come back from the child: every held byte goes back, every flush waiter wakes."""
        with self._lock:
            held, self._inflight = list(self._inflight.values()), {}
            waiters = list(self._waiters)
        for batch, segs in held:
            self._release_with(batch, segs)
        for token in waiters:
            self._answer(token, False)
        self.budget.poke()
