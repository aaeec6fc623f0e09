"""The writer process's side (see writer_process.py): map the server's staging memory, rebuild each batch
from its layout message, and hand it to an ordinary DumpWriter.

    python -m sglang_eagle3_ext.dump.writer_child SOCKET_FD RING_FD RING_BYTES NAME   (started by the server)
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
from multiprocessing.connection import Connection
from multiprocessing.reduction import recvfds

from .staging import map_shared, tensor_at


def _dtype(name: str):
    import torch

    return getattr(torch, name)


class _Staging:
    """What the child's status file shows of the parent's ring."""

    def __init__(self, nbytes: int):
        self.capacity, self.fallbacks = nbytes, 0


def _batch_from(desc: dict, ring, seg_bufs: list):
    from .assemble import ChunkBatch

    def get(k):
        f = desc["fields"][k]
        if f[0] == "value":
            return f[1]
        if f[0] == "ring":
            return tensor_at(ring, f[1], f[2], _dtype(f[3]))
        return tensor_at(seg_bufs[f[1]], f[3], f[4], _dtype(f[5]))

    norm = None
    if desc["norm"] is not None:
        import torch

        raw, shape, dtype, eps = desc["norm"]
        norm = (torch.frombuffer(bytearray(raw), dtype=torch.float32).view(shape).to(_dtype(dtype)), eps)
    return ChunkBatch(desc["rids"], desc["pfx"], desc["ext"], get("orig_lens"), get("ids"), get("aux"),
                      desc["layout"], get("pre"), get("post"), None, desc["nbytes"], norm, row_ok=get("row_ok"))


def child_main(sock_fd: int, ring_fd: int, ring_bytes: int, name: str) -> int:
    from .config import DumpConfig
    from .writer import DumpStartupError, DumpWriter

    sock = socket.socket(fileno=sock_fd)
    conn = Connection(os.dup(sock_fd))
    lock = threading.Lock()

    def send(msg) -> None:
        with lock:
            try:
                conn.send(msg)
            except OSError:
                pass                  # the server is gone: the receive loop sees it and stops the writer

    _, cfg_d, meta = conn.recv()
    if cfg_d.get("layers") is not None:
        cfg_d["layers"] = tuple(cfg_d["layers"])
    # The server process budgets host memory (its forward thread waits there); never wait here too.
    cfg = dataclasses.replace(DumpConfig(**cfg_d), max_pending_bytes=1 << 62)
    ring = map_shared(ring_fd, ring_bytes)
    try:
        w = DumpWriter(cfg, meta, name=name)
    except DumpStartupError as e:
        send(("error", str(e)))
        return 2
    received = [0]
    w.staging = staging = _Staging(ring_bytes)
    w.on_written = lambda sid: send(("done", sid))
    w.on_stop = lambda reason: send(("stopped", reason))
    def progress() -> None:
        # counted under the send lock: a count taken earlier must never arrive later (the server would
        # then wait for work that is already done)
        with lock:
            try:
                conn.send(("busy", received[0], w.busy()))
            except OSError:
                pass

    w.on_progress = progress
    send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
            # a batch's own segments follow its message as file descriptors, in segment order
            seg_sizes = dict(f[1:3] for f in msg[1]["fields"].values() if f[0] == "seg") if msg[0] == "batch" else {}
            fds = recvfds(sock, len(seg_sizes)) if seg_sizes else []
        except (EOFError, OSError):
            # The server died. Samples already being written finish (each file is atomic); nothing new
            # starts: the restarted server re-dumps whatever the manifest lacks, and a late write of ours
            # racing it would list a sample twice.
            w.accepting = False
            break
        if msg[0] == "batch":
            bid = msg[1]["id"]
            segs = [map_shared(fd, seg_sizes[i]) for i, fd in enumerate(fds)]
            for fd in fds:
                os.close(fd)          # the mapping keeps the memory
            staging.fallbacks += bool(segs)
            b = _batch_from(msg[1], ring, segs)
            b.free_host = lambda bid=bid: send(("free", bid))
            received[0] += 1
            w.reserve(b.nbytes)
            w.submit(b)
        elif msg[0] == "flush":
            ok = w.flush(msg[2])
            send(("flushed", msg[1], ok, dict(w.stats)))
        elif msg[0] == "stop":           # the server gave up waiting for us (writer.STALL_S)
            w.stop_stalled(msg[1])
        elif msg[0] == "close":
            break
    w.close()
    send(("closed", dict(w.stats)))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
