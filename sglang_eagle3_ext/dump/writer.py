"""The dump writer: everything after the device->host copy happens here, off the scheduler thread.

forward thread:  reserve(bytes) [blocks when the host budget is used up: backpressure, never a drop]
                 -> async copies -> submit(batch)
assembler thread: wait for the copy event, stitch chunks per request (assemble.py)
io threads:       check finite, write the safetensors file atomically, then append to the manifest

Any OSError while writing (disk full, quota, read-only, I/O error) stops dumping for the rest of the
process: serving continues, the manifest stays consistent (it only lists renamed, fsynced files).
"""
from __future__ import annotations

import errno
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._log import log_once, logger
from .assemble import Assembler, ChunkBatch, Sample
from .config import ENV_DISCARD, ENV_ENCODING, MANIFEST_DIR, META_FILE, NORM_FILE, SAMPLES_DIR, DumpConfig
from .encoding import BY_ENV, NATIVE, describe, encode_sample
from .fmt import T_AUX, T_IDS, atomic_write, write_json_atomic, write_sample
from .manifest import ManifestWriter, read_manifest, sample_path, sample_relpath

STATUS_DIR = "status"
STATUS_EVERY_S = 5.0     # status file refresh while dumping
# Fields of dump_meta.json that must match when a run appends to an existing dump dir.
IDENTITY_KEYS = ("layer_indices_hf", "hidden_size", "num_hidden_layers", "architecture", "final", "dtype",
                 "encoding")
IDENTITY_DEFAULTS = {"encoding": NATIVE}   # dumps made before the key existed


class DumpStartupError(RuntimeError):
    pass


class Budget:
    """Bytes of host memory held by in-flight batches. acquire() waits while that would exceed the cap
    *and* waiting can help (some held bytes belong to work that will finish); bytes parked in
    half-stitched requests cannot be freed by waiting, so then it overshoots (logged) instead of deadlocking."""

    def __init__(self, cap: int, progress_possible):
        self.cap, self.used = cap, 0
        self._progress_possible = progress_possible
        self._cond = threading.Condition()
        self.waited_s = 0.0

    def acquire(self, n: int) -> None:
        with self._cond:
            t0 = None
            while self.used and self.used + n > self.cap and self._progress_possible():
                if t0 is None:
                    t0 = time.monotonic()
                    log_once("dump.backpressure", "dump writer is behind: the forward pass waits for the writer "
                             "(host budget %d MB full); raise SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB or use faster "
                             "storage", self.cap >> 20, level=logging.WARNING)
                self._cond.wait(0.5)
            if t0 is not None:
                self.waited_s += time.monotonic() - t0
            if self.used + n > self.cap and self.used:
                log_once("dump.overshoot", "dump host budget exceeded by partially stitched requests "
                         "(%d + %d > %d bytes); continuing rather than deadlocking", self.used, n, self.cap,
                         level=logging.WARNING)
            self.used += n

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()

    def poke(self) -> None:
        with self._cond:
            self._cond.notify_all()


def check_dump_dir(path: str) -> Path:
    """The dump dir must exist and be writable: a typo must not silently create a new tree."""
    p = Path(path)
    if not p.is_dir():
        raise DumpStartupError(f"dump dir {path} does not exist (create it first; it is not created for you)")
    probe = p / f".write_probe.{os.getpid()}"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"ok")
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as e:
        raise DumpStartupError(f"dump dir {path} is not writable: {e}") from e
    return p


class ForwardThreadApi:
    """What the capture calls on the forward thread, common to both writers (needs done_ids, budget)."""

    checks_finite_off_gil = False   # True: the NaN/Inf check costs the forward thread nothing where it runs

    def is_done(self, sample_id: str) -> bool:
        return sample_id in self.done_ids

    def reserve(self, nbytes: int) -> None:
        """Backpressure: may block the forward thread until host memory is free; never drops."""
        self.budget.acquire(nbytes)

    def unreserve(self, nbytes: int) -> None:
        self.budget.release(nbytes)

    def _release(self, batch: ChunkBatch) -> None:
        """Nothing holds the batch's host copies any more: their staging region and budget go back (once)."""
        if batch.free_host is not None:
            batch.free_host()
            batch.free_host = None
        self.budget.release(batch.nbytes)


class DumpWriter(ForwardThreadApi):
    def __init__(self, cfg: DumpConfig, meta: dict, name: str = "dp0"):
        self.cfg, self.meta, self.name = cfg, dict(meta), name
        self.encoding = BY_ENV[cfg.encoding]
        self.meta.update(describe(self.encoding))
        self.root = check_dump_dir(cfg.dump_dir)
        for sub in (SAMPLES_DIR, MANIFEST_DIR, STATUS_DIR):
            (self.root / sub).mkdir(exist_ok=True)
        self._check_or_write_meta()
        self._clean_own_tmp()
        self.done_ids: set[str] = set(read_manifest(self.root))
        self.manifest = ManifestWriter(self.root, name)
        self.num_aux = len(meta["layer_indices_hf"])
        self.stats = dict(written=0, tokens=0, bytes=0, nonfinite=0, refused_prefix_cache=0, refused_other=0,
                          already_done=0, batches=0, discarded=0)
        self.accepting = True
        self.stop_reason: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._queued = 0          # batches submitted, not yet assembled
        self._io_pending = 0      # samples handed to io, not yet finished
        self._count_lock = threading.Lock()
        self.budget = Budget(cfg.max_pending_bytes, lambda: self.busy() > 0)
        self._asm = Assembler(self.is_done, self._release, cfg.min_tokens)
        self._io = ThreadPoolExecutor(cfg.io_threads, thread_name_prefix="sge3-dump-io")
        self._norm_written = (self.root / NORM_FILE).exists()
        self.staging = None       # the capture's PinnedRing, when it has one (shown in the status file)
        # the writer process (writer_process.py) reports these to the server: callables(sample_id), (reason), ()
        self.on_written = self.on_stop = self.on_progress = None
        self._status_at, self._status_counts = 0.0, {}   # when, and the counters, the status file last showed
        self._thread = threading.Thread(target=self._assemble_loop, name="sge3-dump-assembler", daemon=True)
        self._thread.start()
        if cfg.discard:
            logger.warning("dump: %s=1: capturing and stitching every sample but WRITING NONE (a benchmarking "
                           "aid; unset it to dump)", ENV_DISCARD)
        self._write_status(self._running_state)

    # ---- start-up ---------------------------------------------------------------------------------
    def _check_or_write_meta(self) -> None:
        path = self.root / META_FILE
        if path.exists():
            import json

            try:
                old = json.loads(path.read_text())
            except ValueError as e:
                raise DumpStartupError(f"{path} is unreadable ({e}); use a fresh dump dir") from e
            diff = {k: (old.get(k, IDENTITY_DEFAULTS.get(k)), self.meta.get(k)) for k in IDENTITY_KEYS
                    if old.get(k, IDENTITY_DEFAULTS.get(k)) != self.meta.get(k)}
            if diff:
                hint = f" ({ENV_ENCODING} selects the encoding)" if "encoding" in diff else ""
                raise DumpStartupError(f"dump dir {self.root} holds a dump with different settings {diff} "
                                       f"(existing, now){hint}; use a fresh dump dir")
            return
        write_json_atomic(path, self.meta)

    def _clean_own_tmp(self) -> None:
        """Temporary files a killed run of this writer left behind (never listed in a manifest)."""
        tag = f".tmp{self.name}."
        for p in (self.root / SAMPLES_DIR).rglob(".*"):
            if tag in p.name:
                try:
                    p.unlink()
                except OSError:
                    pass

    def _write_status(self, state: str, error: str | None = None) -> None:
        with self._count_lock:
            self._status_counts = dict(self.stats)
        self._status_at = time.monotonic()
        stats = dict(self._status_counts)
        ring = self.staging
        if ring is not None:
            stats.update(staging_mb=ring.capacity >> 20, staging_fallbacks=ring.fallbacks)
        try:
            write_json_atomic(self.root / STATUS_DIR / f"{self.name}.json",
                              {"state": state, "error": error, "pid": os.getpid(), "time": time.time(),
                               "stats": stats})
        except OSError:
            pass  # the disk may be the problem; the log line says it

    @property
    def _running_state(self) -> str:
        return "discarding" if self.cfg.discard else "dumping"

    def _refresh_status(self) -> None:
        """While dumping, the status file follows the counters (at most every STATUS_EVERY_S), so
        `dump status` shows skips and refusals during a run, not only after it."""
        if self.accepting and time.monotonic() - self._status_at >= STATUS_EVERY_S:
            with self._count_lock:
                changed = self.stats != self._status_counts
            if changed:
                self._write_status(self._running_state)

    # ---- forward-thread API (and ForwardThreadApi) -------------------------------------------------
    def host_buffers(self, specs: dict, cuda: bool) -> dict:
        """{name: empty host tensor} for each (shape, dtype) when the staging ring has no room (or on a CPU
        model, which has none): pinned on a CUDA model, so the copies stay asynchronous."""
        import torch

        if self.staging is not None:
            log_once("dump.ring_full", "dump: the pinned staging buffer has no contiguous room for a batch; such "
                     "batches allocate their own pinned memory (slower). Said once; a larger "
                     "SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB avoids it", level=logging.INFO)
        return {k: torch.empty(shape, dtype=dtype, device="cpu", pin_memory=cuda) for k, (shape, dtype) in specs.items()}

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
                self._refresh_status()
                continue
            if batch is None:
                return
            try:
                if not self.accepting:
                    self._asm.drop_all()
                    batch.wait()        # its host memory is reused only after the copies into it landed
                    batch.add_ref()
                    self._asm._unref(batch)
                    continue
                batch.wait()
                self._inc("batches")
                if batch.norm is not None and not self._norm_written:
                    self._write_norm(*batch.norm)
                done, refused = self._asm.feed(batch)
                for r in refused:
                    self._inc("refused_prefix_cache" if r.kind == "prefix_cache" else "refused_other")
                    log_once(f"dump.refuse.{r.kind}", "dump: not writing request %s: %s (said once per kind; "
                             "counted in status/%s.json)", r.rid, r.reason, self.name, level=logging.WARNING)
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

    def _write_norm(self, weight, eps: float) -> None:
        from safetensors.torch import save_file
        import json

        meta = {"eps": repr(float(eps)), "note": "model.norm (final RMSNorm) weight: postnorm = rms_norm(prenorm)"}
        try:
            atomic_write(self.root / NORM_FILE, lambda p: save_file({"weight": weight.contiguous()}, p,
                                                                    metadata={"sge3_norm": json.dumps(meta)}))
            self._norm_written = True
        except OSError as e:
            self._stop(e)

    def _write_one(self, s: Sample) -> None:
        try:
            if not self.accepting or s.sample_id in self.done_ids:
                if s.sample_id in self.done_ids:
                    self._inc("already_done")
                return
            if self.cfg.discard:
                self._inc("discarded")
                return
            tensors = s.materialize(self.num_aux)
            finite = s.finite()
            if finite is None:
                finite = all(bool(t.isfinite().all()) for k, t in tensors.items() if k != T_IDS)
            if not finite:
                self._inc("nonfinite")
                log_once("dump.nonfinite", "dump: skipping request %s: NaN/Inf in its hidden states (counted in "
                         "status/%s.json)", s.rid, self.name, level=logging.WARNING)
                return
            n = int(tensors[T_IDS].shape[0])
            meta = {**self.meta, "sample_id": s.sample_id, "rid": s.rid, "num_tokens": n,
                    "tensors": {k: list(v.shape) for k, v in tensors.items()}}
            if self.encoding != NATIVE:    # here, on an io thread: never on the forward thread
                tensors, meta["encoded"] = encode_sample(tensors, {T_AUX: self.num_aux})
            path = sample_path(self.root, s.sample_id)
            size = write_sample(path, tensors, meta, tmp_tag=self.name, sync_dir=False)
            self.manifest.append({"id": s.sample_id, "rid": s.rid, "file": sample_relpath(s.sample_id),
                                  "num_tokens": n, "bytes": size, "writer": self.name, "t": round(time.time(), 3)},
                                 sync_dir=path.parent)
            self.done_ids.add(s.sample_id)
            if self.on_written is not None:
                self.on_written(s.sample_id)
            self._inc("written")
            self._inc("tokens", n)
            self._inc("bytes", size)
        except OSError as e:
            self._stop(e)
        except Exception as e:  # noqa: BLE001
            log_once("dump.write_error", "dump: failed to write request %s: %s", s.rid, e, level=logging.ERROR)
            self._inc("refused_other")
        finally:
            self._asm.finish(s)
            with self._count_lock:
                self._io_pending -= 1
            self.budget.poke()
            self._progressed()

    def busy(self) -> int:
        """Batches not yet stitched + samples being written: work that ends in releasing host memory."""
        with self._count_lock:
            return self._queued + self._io_pending

    def _progressed(self) -> None:
        if self.on_progress is not None:
            self.on_progress()

    def _inc(self, key: str, n: int = 1) -> None:
        with self._count_lock:
            self.stats[key] += n

    def _stop(self, exc: BaseException) -> None:
        if not self.accepting:
            return
        self.accepting = False
        kind = errno.errorcode.get(getattr(exc, "errno", None) or -1, type(exc).__name__)
        self.stop_reason = f"{kind}: {exc}"
        logger.error("dump: STOPPED writing (%s); serving continues; the manifest lists only complete samples. "
                     "Fix the cause and re-run the dump client to resume.", self.stop_reason)
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
