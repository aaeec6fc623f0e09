"""One pinned host buffer, allocated once, that the forward thread carves the dump's device->host
copies out of.

Why: a fresh pinned allocation per request (cudaHostAlloc, tens of MB) costs milliseconds on the
forward thread, and the allocator caches blocks per size, so varied prompt lengths keep paying it.
Regions are taken in ring order and may be freed out of order (samples finish on several io threads);
the tail advances over freed regions. When no contiguous space is free, alloc() returns None and the
caller falls back to an ordinary pinned allocation: the ring only ever makes the copy cheaper, the
host-memory budget (backpressure.Budget) still decides when the forward pass must wait.
"""

from __future__ import annotations

import collections
import math
import os
import threading

from ..._log import log_once

ALIGN = 512  # keeps every sub-tensor aligned for any dtype view and for DMA


def _up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Region:
    __slots__ = ("start", "end", "freed")

    def __init__(self, start: int, end: int):
        self.start, self.end, self.freed = start, end, False


class PinnedRing:
    def __init__(self, nbytes: int, pin: bool = True, buf=None):
        import torch

        self.capacity = _up(nbytes)
        if buf is None:  # device="cpu" explicitly: SGLang builds the model (so this ring) under torch.device("cuda")
            buf = torch.empty(self.capacity, dtype=torch.uint8, device="cpu", pin_memory=pin)
        self.buf = buf
        self._live: collections.deque[Region] = collections.deque()  # allocation order
        self._head = 0  # next free byte
        self._lock = threading.Lock()
        self._views = {}
        self.allocated = self.fallbacks = 0  # regions handed out / requests that did not fit

    def alloc(self, nbytes: int) -> Region | None:
        n = _up(max(nbytes, 1))
        with self._lock:
            if not self._live:
                self._head = 0
                start = 0 if n <= self.capacity else None
            else:
                tail = self._live[0].start
                if self._head > tail:  # free: [head, capacity), then wrapping, [0, tail)
                    start = self._head if self._head + n <= self.capacity else (0 if n <= tail else None)
                else:  # wrapped (head == tail: full): free is [head, tail)
                    start = self._head if self._head + n <= tail and self._head < tail else None
            if start is None:
                self.fallbacks += 1
                return None
            r = Region(start, start + n)
            self._live.append(r)
            self.allocated += 1
            self._head = r.end
            return r

    def free(self, region: Region) -> None:
        with self._lock:
            region.freed = True
            while self._live and self._live[0].freed:
                self._live.popleft()

    def tensors(self, region: Region, specs):
        """Views of the region, one per (shape, dtype) in specs, each starting on an ALIGN boundary."""
        import torch

        out, off = [], region.start
        for shape, dtype in specs:
            n = _nbytes(shape, dtype)
            # one torch call per tensor (on the forward thread): a strided view of the buffer seen as dtype;
            # ALIGN keeps every offset a multiple of the item size
            out.append(
                self._typed(dtype).as_strided(shape, _contiguous_strides(shape), off // dtype.itemsize)
                if n
                else torch.empty(shape, dtype=dtype, device="cpu")
            )
            off += _up(n)
        return out

    def _typed(self, dtype):
        """The whole buffer viewed as dtype, made once per dtype."""
        t = self._views.get(dtype)
        if t is None:
            t = self._views[dtype] = self.buf.view(dtype)
        return t


def _contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def region_size(specs) -> int:
    return sum(_up(_nbytes(s, d)) for s, d in specs)


class SharedMemory:
    """Anonymous shared memory (a memfd) as a uint8 host tensor, mappable by another process through
    `fd` (inherited) or `path` (/proc/<pid>/fd/<fd>): the writer process's view of the host copies."""

    def __init__(self, nbytes: int, name: str = "sge3-dump"):
        import mmap

        import torch

        self.nbytes = max(_up(nbytes), ALIGN)
        self.fd = os.memfd_create(name)  # close-on-exec: only pass_fds hands it to the writer process
        os.ftruncate(self.fd, self.nbytes)
        self._mm = mmap.mmap(self.fd, self.nbytes)
        self.buf = torch.frombuffer(self._mm, dtype=torch.uint8)
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
        self.pinned = False

    def pin(self) -> None:
        """Page-lock it for the GPU (cudaHostRegister): device->host copies into it are then asynchronous."""
        import torch

        # as torch.cuda._pin_memory_utils.pin_memory does (flag 1: cudaHostRegisterPortable)
        err = int(torch.cuda.cudart().cudaHostRegister(self.buf.data_ptr(), self.nbytes, 1))
        if err != 0:
            raise RuntimeError(f"cudaHostRegister({self.nbytes >> 20} MB) failed with CUDA error {err}")
        self.pinned = True

    def contains(self, t) -> int | None:
        """Byte offset of tensor t in this memory, None when it lives elsewhere."""
        base, p = self.buf.data_ptr(), t.data_ptr()
        return p - base if base <= p < base + self.nbytes else None

    def close(self) -> None:
        """Give the memory back once nothing maps it (views keep the mapping alive until collected)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def map_shared(path_or_fd, nbytes: int):
    """The uint8 tensor over a SharedMemory of another process (read and written in place)."""
    import mmap

    import torch

    fd = path_or_fd if isinstance(path_or_fd, int) else os.open(path_or_fd, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, nbytes)
    finally:
        if not isinstance(path_or_fd, int):
            os.close(fd)
    return torch.frombuffer(mm, dtype=torch.uint8)


def tensor_at(buf, offset: int, shape, dtype):
    """The contiguous tensor of `shape`/`dtype` that starts `offset` bytes into uint8 tensor `buf`."""
    n = _nbytes(shape, dtype)
    return buf[offset : offset + n].view(dtype).view(shape)


def ring_for(cfg):
    """The pinned staging ring of a CUDA model's thread writer, allocated at model init, before any CUDA graph
    capture and before serving. None when pinning fails (per-batch pinned allocations then). The writer
    process brings its own, shared with it (writer/process.py)."""
    import logging
    import time

    try:
        t0 = time.monotonic()
        # PyTorch's pinned allocator rounds up to a power of two: round down instead, so the pinned
        # memory never exceeds the budget (what does not fit falls back to per-batch allocations)
        ring = PinnedRing(1 << (cfg.max_pending_bytes.bit_length() - 1))
    except Exception as e:  # noqa: BLE001 - slower, still correct
        log_once(
            "dump.ring",
            "dump: could not pin a %d MB staging buffer (%s: %s): each batch allocates its own "
            "pinned memory (slower); lower SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB",
            cfg.max_pending_bytes >> 20,
            type(e).__name__,
            e,
            level=logging.WARNING,
        )
        return None
    log_once(
        "dump.ring",
        "dump: pinned a %d MB host staging buffer for the device->host copies in %.1f s "
        "(SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB; allocated once instead of per request)",
        ring.capacity >> 20,
        time.monotonic() - t0,
    )
    return ring
