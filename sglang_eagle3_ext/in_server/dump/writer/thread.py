"""The dump writer: everything after the device->host copy happens here, off the scheduler thread.

forward thread:  reserve(bytes) [blocks when the host budget is used up: backpressure, never a drop]
                 -> async copies -> submit(batch)
assembler thread: wait for the copy event, stitch chunks per request (assemble.py)
io threads:       check finite, write the safetensors file atomically, then append to the manifest

An error of the disk or of the dump dir (disk full, quota, read-only, I/O error, permissions, the dump
dir removed or replaced) stops dumping for the rest of the process: serving continues, the manifest stays
consistent (it only lists renamed, fsynced files). An error of one sample (its file name, a bad tensor)
skips that sample only; MAX_CONSECUTIVE_ERRORS such failures in a row stop dumping too.
No wait is unbounded: the forward thread waits for host memory at most backpressure.STALL_S without any of
it coming back, then dumping stops.
"""

from __future__ import annotations

import errno
import itertools
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ...._log import log_once, logger
from ....dump.config import ENV_DISCARD, MANIFEST_DIR, NORM_FILE, SAMPLES_DIR, DumpConfig
from ....dump.encoding import BY_ENV, NATIVE, describe, encode_sample
from ....dump.manifest import ManifestWriter, read_manifest, sample_path, sample_relpath
from ....dump.sample_file import T_AUX, T_IDS, atomic_write, dir_known, write_sample
from ....dump.status import STATUS_DIR, DumpStartupError, StatusFile, dir_identity, meta_mismatch, validate_dump_root
from ..assemble import Assembler, ChunkBatch, Sample
from ..staging import PinnedRing
from .backpressure import Budget, ForwardThreadApi
from .hygiene import remove_own_tmp, unfit

STATUS_EVERY_S = 5.0  # status file refresh (and dump dir check) while dumping
IDLE_RELEASE_S = 30.0  # no batch for this long: no request can be mid-prefill, partials are dead requests
# errors that concern one sample's file; any other OSError is the disk's or the dump dir's and stops dumping
PER_SAMPLE_ERRNOS = frozenset({errno.ENOENT, errno.ENAMETOOLONG, errno.EINVAL})
MAX_CONSECUTIVE_ERRORS = 16


REFUSAL_COUNTERS = {
    "prefix_cache": "refused_prefix_cache",
    "duplicate_id": "refused_duplicate_id",
    "multimodal": "skipped_multimodal",
}


class DumpWriter(ForwardThreadApi):
    """The writer in this process: an assembler thread and io threads (see the module docstring)."""

    def __init__(self, cfg: DumpConfig, meta: dict, name: str = "dp0", staging: PinnedRing | None = None):
        """staging: the ring the capture copies into (None: host_buffers() per batch), shown in the status file."""
        self.cfg, self.meta, self.name = cfg, dict(meta), name
        self.encoding = BY_ENV[cfg.encoding]
        self.meta.update(describe(self.encoding))
        self.root = validate_dump_root(cfg.dump_dir)
        self._root_id = dir_identity(self.root)  # a dump dir removed or replaced while serving stops dumping
        for sub in (SAMPLES_DIR, MANIFEST_DIR, STATUS_DIR):
            (self.root / sub).mkdir(exist_ok=True)
        why = meta_mismatch(self.root, self.meta)
        if why is not None:
            raise DumpStartupError(why)
        remove_own_tmp(str(self.root / SAMPLES_DIR), name)
        self.done_ids: set[str] = set(read_manifest(self.root))
        self.manifest = ManifestWriter(self.root, name)
        self.num_aux = len(meta["layer_indices_hf"])
        self.stats = dict(
            written=0,
            tokens=0,
            bytes=0,
            nonfinite=0,
            refused_prefix_cache=0,
            refused_other=0,
            refused_duplicate_id=0,
            ended_unfinished=0,
            write_errors=0,
            already_done=0,
            batches=0,
            discarded=0,
            skipped_multimodal=0,
            refused_token_id=0,
        )
        self._consecutive_errors = 0
        self._tmp_seq = itertools.count()  # a temporary file name of its own for every write
        self.accepting = True
        self.stop_reason: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._queued = 0  # batches submitted, not yet assembled
        self._io_pending = 0  # samples handed to io, not yet finished
        self._count_lock = threading.Lock()
        self.budget = Budget(cfg.max_pending_bytes, lambda: self.busy() > 0)
        self._asm = Assembler(self.is_done, self.release_host, cfg.min_tokens)
        self._io = ThreadPoolExecutor(cfg.io_threads, thread_name_prefix="sge3-dump-io")
        self._norm_written = (self.root / NORM_FILE).exists()
        self.staging = staging
        # the writer process (process.py) reports these to the server: callables(sample_id), (reason), ()
        self.on_written = self.on_stop = self.on_progress = None
        self._status = StatusFile(self.root, name)
        self._last_batch_at = self._root_checked_at = time.monotonic()
        self._thread = threading.Thread(target=self._assemble_loop, name="sge3-dump-assembler", daemon=True)
        self._thread.start()
        if cfg.discard:
            logger.warning(
                "dump: %s=1: capturing and stitching every sample but WRITING NONE (a benchmarking "
                "aid; unset it to dump)",
                ENV_DISCARD,
            )
        self._write_status(self._running_state)

    # ---- counters and status file -----------------------------------------------------------------
    def _counters(self) -> dict:
        """The counters, plus the host memory held and the requests half-stitched (status file, `dump status`)."""
        with self._count_lock:
            out = dict(self.stats)
        out.update(pending_bytes=self.budget.used, partials=len(self._asm.partials))
        return out

    def _write_status(self, state: str, error: str | None = None) -> None:
        self._status.write(state, self._counters(), self.staging, error)

    @property
    def _running_state(self) -> str:
        return "discarding" if self.cfg.discard else "dumping"

    def _refresh_status(self) -> None:
        """While dumping, the status file follows the counters (at most every STATUS_EVERY_S), so
        `dump status` shows skips and refusals during a run, not only after it."""
        now = time.monotonic()
        if self.accepting and now - self._root_checked_at >= STATUS_EVERY_S:
            self._root_checked_at = now  # here, not per sample: an io thread's write resolves no path
            if not self._root_ok():
                return
        if self.accepting and self._status.stale(STATUS_EVERY_S):
            if self._counters() != self._status.counts:
                self._write_status(self._running_state)

    # ---- forward-thread API (ForwardThreadApi) -----------------------------------------------------
    def host_buffers(self, specs: dict, cuda: bool) -> dict:
        """{name: empty host tensor} for each (shape, dtype) when the staging ring has no room (or on a CPU
        model, which has none): pinned on a CUDA model, so the copies stay asynchronous."""
        import torch

        if self.staging is not None:
            log_once(
                "dump.ring_full",
                "dump: the pinned staging buffer has no contiguous room for a batch; such "
                "batches allocate their own pinned memory (slower). Said once; a larger "
                "SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB avoids it",
                level=logging.INFO,
            )
        return {
            k: torch.empty(shape, dtype=dtype, device="cpu", pin_memory=cuda) for k, (shape, dtype) in specs.items()
        }

    def submit(self, batch: ChunkBatch) -> None:
        with self._count_lock:
            self._queued += 1
        self._queue.put(batch)

    # ---- background -------------------------------------------------------------------------------
    def _assemble_loop(self) -> None:
        while True:
            try:
                batch = self._queue.get(timeout=STATUS_EVERY_S)
            except queue.Empty:
                self._idle()
                continue
            if batch is None:
                return
            try:
                if not self.accepting:
                    self._asm.drop_all()
                    batch.wait()  # its host memory is reused only after the copies into it landed
                    self._asm.release_unused(batch)
                    continue
                batch.wait()
                self._last_batch_at = time.monotonic()
                self.count("batches")
                if batch.norm is not None and not self._norm_written:
                    self._write_norm(*batch.norm)
                ended = self._asm.ended
                done, refused = self._asm.feed(batch)
                self.count("ended_unfinished", self._asm.ended - ended)
                for r in refused:
                    self.count(REFUSAL_COUNTERS.get(r.kind, "refused_other"))
                    log_once(
                        f"dump.refuse.{r.kind}",
                        "dump: not writing request %s: %s (said once per kind; counted in status/%s.json)",
                        r.rid,
                        r.reason,
                        self.name,
                        level=logging.WARNING,
                    )
                for s in done:
                    with self._count_lock:
                        self._io_pending += 1
                    self._io.submit(self._write_one, s)
            except Exception as e:  # noqa: BLE001 - never kill the thread silently
                self._stop(e)
            finally:
                with self._count_lock:
                    self._queued -= 1
                self.budget.poke()
                self._refresh_status()
                self._progressed()

    def _idle(self) -> None:
        """No batch for STATUS_EVERY_S: release requests that ended unfinished once no prefill can be running,
        refresh the status file (and check the dump dir is still ours)."""
        if self._asm.partials and time.monotonic() - self._last_batch_at >= IDLE_RELEASE_S:
            self.count("ended_unfinished", self._asm.release_ended(0))
        self._refresh_status()

    def _root_ok(self) -> bool:
        """The dump dir is the one this writer started in; else dumping stops (said loudly, once)."""
        now = dir_identity(self.root)
        if now == self._root_id:
            return True
        self._stop(
            RuntimeError(
                f"the dump dir {self.root} was {'removed' if now is None else 'replaced'} while "
                f"serving (its inode changed): nothing more is written; restart the server to "
                f"dump into a new dir"
            ),
            status=False,
        )
        return False

    def stop_stalled(self, reason: str) -> None:
        self._stop(TimeoutError(reason))

    def _write_norm(self, weight, eps: float) -> None:
        import json

        from safetensors.torch import save_file

        meta = {"eps": repr(float(eps)), "note": "model.norm (final RMSNorm) weight: postnorm = rms_norm(prenorm)"}
        try:
            atomic_write(
                self.root / NORM_FILE,
                lambda p: save_file({"weight": weight.contiguous()}, p, metadata={"sge3_norm": json.dumps(meta)}),
            )
            self._norm_written = True
        except OSError as e:
            self._stop(e)

    def _write_one(self, s: Sample) -> None:
        try:
            if not self.accepting or s.sample_id in self.done_ids:
                if s.sample_id in self.done_ids:
                    self.count("already_done")
                return
            if self.cfg.discard:
                self.count("discarded")
                return
            tensors = s.materialize(self.num_aux)
            why = unfit(s, tensors, self.meta.get("vocab_size"), self.name)
            if why is not None:
                self.count(why)
                return
            n = int(tensors[T_IDS].shape[0])
            extra = getattr(s, "record_extra", None) or {}  # dump while serving: token sources (serving_assembler)
            meta = {
                **self.meta,
                "sample_id": s.sample_id,
                "rid": s.rid,
                "num_tokens": n,
                "tensors": {k: list(v.shape) for k, v in tensors.items()},
                **extra,
            }
            if self.encoding != NATIVE:  # here, on an io thread: never on the forward thread
                tensors, meta["encoded"] = encode_sample(tensors, {T_AUX: self.num_aux})
            path = sample_path(self.root, s.sample_id)
            if not dir_known(path.parent) and not self._root_ok():  # would make dirs: in our dump dir only
                return
            size = write_sample(path, tensors, meta, tmp_tag=f"{self.name}.{next(self._tmp_seq)}", sync_dir=False)
            self.manifest.append(
                {
                    "id": s.sample_id,
                    "rid": s.rid,
                    "file": sample_relpath(s.sample_id),
                    "num_tokens": n,
                    "bytes": size,
                    "writer": self.name,
                    "t": round(time.time(), 3),
                    **extra,
                },
                sync_dir=path.parent,
            )
            self.done_ids.add(s.sample_id)
            if self.on_written is not None:
                self.on_written(s.sample_id)
            self.count("written")
            self.count("tokens", n)
            self.count("bytes", size)
            self._consecutive_errors = 0
        except OSError as e:
            if self._root_ok():
                if e.errno in PER_SAMPLE_ERRNOS:
                    self._sample_failed(s, e)
                else:
                    self._stop(e)
        except Exception as e:  # noqa: BLE001 - this sample's problem: the others go on
            self._sample_failed(s, e)
        finally:
            self._asm.finish(s)
            with self._count_lock:
                self._io_pending -= 1
            self.budget.poke()
            self._progressed()

    def _sample_failed(self, s: Sample, e: BaseException) -> None:
        self.count("write_errors")
        self._consecutive_errors += 1
        log_once(
            "dump.write_error",
            "dump: failed to write request %s (%s: %s); skipped, the others go on (said "
            "once; counted as write_errors in status/%s.json)",
            s.rid,
            type(e).__name__,
            e,
            self.name,
            level=logging.ERROR,
        )
        if self._consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
            self._stop(
                RuntimeError(
                    f"{self._consecutive_errors} samples in a row failed to write; last: {type(e).__name__}: {e}"
                )
            )

    def busy(self) -> int:
        """Batches not yet stitched + samples being written: work that ends in releasing host memory."""
        with self._count_lock:
            return self._queued + self._io_pending

    def _progressed(self) -> None:
        if self.on_progress is not None:
            self.on_progress()

    def count(self, key: str, n: int = 1) -> None:
        with self._count_lock:
            self.stats[key] += n

    def add_counters(self, names) -> None:
        """Counters of an assembler of its own (serving_assembler.py), shown with the writer's."""
        with self._count_lock:
            for k in names:
                self.stats.setdefault(k, 0)

    def set_gauges(self, **values) -> None:
        with self._count_lock:
            self.stats.update(values)

    def use_assembler(self, asm) -> None:
        """Stitch with `asm` (dump while serving: prompt+response samples) instead of the prefill Assembler;
        called at start-up, before the first batch."""
        self._asm = asm

    def _stop(self, exc: BaseException, status: bool = True) -> None:
        with self._count_lock:  # several io threads may fail at once: one stops, once
            if not self.accepting:
                return
            self.accepting = False
        kind = errno.errorcode.get(getattr(exc, "errno", None) or -1, type(exc).__name__)
        self.stop_reason = f"{kind}: {exc}"
        logger.error(
            "dump: STOPPED writing (%s); serving continues; the manifest lists only complete samples. "
            "Fix the cause and re-run the dump client to resume.",
            self.stop_reason,
        )
        if status:  # not into a dump dir that replaced ours
            self._write_status("stopped", self.stop_reason)
        if self.on_stop is not None:
            self.on_stop(self.stop_reason)

    # ---- tests / shutdown -------------------------------------------------------------------------
    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until every submitted batch is assembled and every complete sample written."""
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            if self.busy() == 0:
                return True
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 60.0) -> None:
        self.flush(timeout)
        self._queue.put(None)
        self._thread.join(timeout)
        self._io.shutdown(wait=True)
        self._asm.drop_all()
        self.manifest.close()
        if self.accepting:
            self._write_status("closed")
