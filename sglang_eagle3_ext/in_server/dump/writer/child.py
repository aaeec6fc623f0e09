"""The writer process's side (see process.py): map the server's staging memory, rebuild each batch
from its layout message, and hand it to an ordinary DumpWriter.

    python -m sglang_eagle3_ext.in_server.dump.writer.child SOCKET_FD RING_FD RING_BYTES NAME   (started by the server)
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
from multiprocessing.connection import Connection
from multiprocessing.reduction import recvfds

from ....dump.config import DumpConfig
from ..assemble import ChunkBatch
from ..staging import PinnedRing, map_shared, tensor_at
from . import messages as m
from .thread import DumpStartupError, DumpWriter


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def _batch_from(msg: m.Batch, ring: PinnedRing, seg_bufs: list):

    def get(k):
        f = msg.fields[k]
        if not isinstance(f, m.HostTensor):
            return f  # a plain list (or None)
        buf = ring.buf if f.segment is None else seg_bufs[f.segment]
        return tensor_at(buf, f.offset, f.shape, _dtype(f.dtype))

    norm = None
    if msg.norm is not None:
        import torch

        n = msg.norm
        norm = (torch.frombuffer(bytearray(n.raw), dtype=torch.float32).view(n.shape).to(_dtype(n.dtype)), n.eps)
    return ChunkBatch(
        msg.rids,
        msg.prefix_lens,
        msg.extend_lens,
        get("orig_lens"),
        get("ids"),
        get("aux"),
        msg.aux_layout,
        get("pre"),
        get("post"),
        None,
        msg.nbytes,
        norm,
        row_ok=get("row_ok"),
        multimodal=msg.fields.get("multimodal"),
    )


def child_main(sock_fd: int, ring_fd: int, ring_bytes: int, name: str) -> int:

    sock = socket.socket(fileno=sock_fd)
    conn = Connection(os.dup(sock_fd))
    lock = threading.Lock()

    def send(msg) -> None:
        with lock:
            try:
                conn.send(msg)
            except OSError:
                pass  # the server is gone: the receive loop sees it and stops the writer

    start: m.Start = conn.recv()
    cfg_d = dict(start.cfg)
    if cfg_d.get("layers") is not None:
        cfg_d["layers"] = tuple(cfg_d["layers"])
    # The server process budgets host memory (its forward thread waits there); never wait here too.
    cfg = dataclasses.replace(DumpConfig(**cfg_d), max_pending_bytes=1 << 62)
    # The server's ring, mapped here: batches are read from it; its fallbacks count the batches that came
    # with segments of their own (shown in the status file)
    ring = PinnedRing(ring_bytes, buf=map_shared(ring_fd, ring_bytes))
    try:
        w = DumpWriter(cfg, start.meta, name=name, staging=ring)
    except DumpStartupError as e:
        send(m.StartFailed(str(e)))
        return 2
    received = [0]
    w.on_written = lambda sid: send(m.Written(sid))
    w.on_stop = lambda reason: send(m.Stopped(reason))

    def progress() -> None:
        # counted under the send lock: a count taken earlier must never arrive later (the server would
        # then wait for work that is already done)
        with lock:
            try:
                conn.send(m.Busy(received[0], w.busy()))
            except OSError:
                pass

    w.on_progress = progress
    send(m.Ready(os.getpid()))
    while True:
        try:
            msg = conn.recv()
            # a batch's own segments follow its message as file descriptors, in segment order
            seg_sizes = msg.segment_sizes() if isinstance(msg, m.Batch) else {}
            fds = recvfds(sock, len(seg_sizes)) if seg_sizes else []
        except (EOFError, OSError):
            # The server died. Samples already being written finish (each file is atomic); nothing new
            # starts: the restarted server re-dumps whatever the manifest lacks, and a late write of ours
            # racing it would list a sample twice.
            w.accepting = False
            break
        if isinstance(msg, m.Batch):
            segs = [map_shared(fd, seg_sizes[i]) for i, fd in enumerate(fds)]
            for fd in fds:
                os.close(fd)  # the mapping keeps the memory
            ring.fallbacks += bool(segs)
            b = _batch_from(msg, ring, segs)
            b.free_host = lambda bid=msg.id: send(m.Freed(bid))
            received[0] += 1
            w.reserve(b.nbytes)
            w.submit(b)
        elif isinstance(msg, m.Flush):
            ok = w.flush(msg.timeout)
            send(m.Flushed(msg.token, ok, dict(w.stats)))
        elif isinstance(msg, m.Stop):  # the server gave up waiting for us (backpressure.STALL_S)
            w.stop_stalled(msg.reason)
        elif isinstance(msg, m.Close):
            break
    w.close()
    send(m.Closed(dict(w.stats)))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
