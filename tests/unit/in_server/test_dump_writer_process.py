"""The writer process (SGLANG_EAGLE3_EXT_DUMP_WRITER=process): a real child process, real shared memory,
real files. Batches are put into the writer's shared staging memory exactly as the capture does (ring
region, or the writer's own segment when the ring has no room)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest
import torch
from dump_writer_fixtures import H, K, _meta, _short_samples_allowed  # noqa: F401 (autouse fixture)

from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.manifest import read_manifest
from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, read_sample
from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
from sglang_eagle3_ext.in_server.dump.staging import region_size
from sglang_eagle3_ext.in_server.dump.writer.process import ProcessDumpWriter
from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError


def _writer(tmp_path, pending=1 << 20):
    w = ProcessDumpWriter(
        C.DumpConfig(
            dump_dir=str(tmp_path), layers=(1, 2, 3), final="both", max_pending_bytes=pending, writer="process"
        ),
        _meta(),
    )
    assert w.staging is not None and w.staging.capacity == w._mem.nbytes  # the shared memory, from the start
    return w


def _stage(w, rids, prefix, ext, orig, seed=0, packed=False, nan=False):
    """Source tensors, and the batch whose host tensors live in the writer's shared memory."""
    T = sum(ext)
    g = torch.Generator().manual_seed(seed)
    src = {
        "ids": torch.cat([torch.arange(p, p + n) for p, n in zip(prefix, ext)]),
        "aux": torch.randn(T, K * H, generator=g) if packed else torch.randn(K, T, H, generator=g),
        "pre": torch.randn(T, H, generator=g),
        "post": torch.randn(T, H, generator=g),
        "orig": torch.tensor(orig),
    }
    if nan:
        src["post"][0, 0] = float("nan")
    specs = {k: (tuple(t.shape), t.dtype) for k, t in src.items()}
    region = w.staging.alloc(region_size(specs.values()))
    dst = dict(zip(specs, w.staging.tensors(region, specs.values()))) if region else w.host_buffers(specs, False)
    for k, t in src.items():
        dst[k].copy_(t)
    nbytes = sum(t.numel() * t.element_size() for t in src.values())
    b = ChunkBatch(
        rids,
        prefix,
        ext,
        dst["orig"],
        dst["ids"],
        dst["aux"],
        "packed" if packed else "list",
        dst["pre"],
        dst["post"],
        None,
        nbytes,
    )
    if region is not None:
        b.free_host = lambda: w.staging.free(region)
    w.reserve(nbytes)
    w.submit(b)
    return src


def _wait(cond, timeout=30):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.02)


def test_stitches_writes_and_resumes_from_a_child(tmp_path):
    w = _writer(tmp_path)
    pid = w._proc.pid
    s1 = _stage(w, ["r1", "nodump-x"], [0, 0], [4, 2], [10, 2], seed=1)
    s2 = _stage(w, ["r1", "r2"], [4, 0], [6, 3], [10, 3], seed=2, packed=True)
    _stage(w, ["bad"], [0], [4], [4], seed=3, nan=True)
    assert w.flush(30)
    man = read_manifest(tmp_path)
    assert set(man) == {"r1", "r2"} and w.is_done("r1") and not w.is_done("bad")
    t, meta = read_sample(tmp_path / man["r1"]["file"])
    assert t[T_IDS].tolist() == list(range(10)) and meta["num_tokens"] == 10
    assert torch.equal(t[T_AUX], torch.cat([s1["aux"][:, 0:4].transpose(0, 1).reshape(4, -1), s2["aux"][0:6]]))
    assert torch.equal(t[T_PRE], torch.cat([s1["pre"][:4], s2["pre"][:6]]))
    assert torch.equal(t[T_POST], torch.cat([s1["post"][:4], s2["post"][:6]]))
    assert w.stats["written"] == 2 and w.stats["nonfinite"] == 1
    _wait(lambda: w.budget.used == 0 and not w.staging._live)  # every byte back in the server process
    w.close()
    assert w._proc.returncode == 0 and os.getpid() != pid
    status = json.loads((tmp_path / "status" / "dp0.json").read_text())
    assert status["state"] == "closed" and status["pid"] == pid  # the child wrote the files
    w2 = _writer(tmp_path)  # restart: done ids are skipped
    assert w2.is_done("r1")
    _stage(w2, ["r1"], [0], [10], [10], seed=9)
    assert w2.flush(30) and w2.stats["written"] == 0
    w2.close()


def test_a_second_close_returns_at_once(tmp_path):
    """A writer closed twice (a shutdown hook and its caller): the second close has nothing to wait for."""
    w = _writer(tmp_path)
    w.close()
    t0 = time.monotonic()
    w.close(timeout=30)
    # a flush nobody answers waits 40 s (timeout + 10); a no-op holds far under 20 s at load 8 on 2 cores
    assert time.monotonic() - t0 < 20


def test_a_batch_the_ring_cannot_hold_travels_in_its_own_segment(tmp_path):
    w = _writer(tmp_path, pending=2048)  # far smaller than one batch
    src = _stage(w, ["big"], [0], [64], [64], seed=4, packed=True)
    assert w.flush(30)
    t, _ = read_sample(tmp_path / read_manifest(tmp_path)["big"]["file"])
    assert torch.equal(t[T_AUX], src["aux"]) and torch.equal(t[T_POST], src["post"])
    _wait(lambda: w.budget.used == 0 and not w._segments)
    w.close()
    assert json.loads((tmp_path / "status" / "dp0.json").read_text())["stats"]["staging_fallbacks"] == 1


def test_a_start_up_error_in_the_child_is_raised_in_the_server(tmp_path):
    _writer(tmp_path).close()
    with pytest.raises(DumpStartupError, match="different settings"):
        ProcessDumpWriter(
            C.DumpConfig(dump_dir=str(tmp_path), layers=(0, 1, 2), final="both", writer="process"),
            {**_meta(), "layer_indices_hf": [0, 1, 2]},
        )


def test_a_dead_child_stops_dumping_and_gives_every_byte_back(tmp_path, caplog):
    w = _writer(tmp_path)
    _stage(w, ["partial"], [0], [4], [10], seed=5)  # half-stitched: held in the child
    _wait(lambda: w._child_received == 1)
    os.kill(w._proc.pid, signal.SIGKILL)
    _wait(lambda: not w.accepting)
    assert "writer process exited" in w.stop_reason
    _wait(lambda: w.budget.used == 0 and not w.staging._live)
    _stage(w, ["after"], [0], [4], [4], seed=6)  # later batches: released at once, never waited on
    _wait(lambda: w.budget.used == 0)
    assert not w.flush(5)
    w.close()
    assert read_manifest(tmp_path) == {}


def test_a_write_error_in_the_child_stops_dumping_in_the_server(tmp_path):
    w = _writer(tmp_path)
    samples = tmp_path / "samples"
    os.rename(samples, tmp_path / "samples.moved")
    samples.write_text("not a directory")  # every sample write now fails (also as root)
    _stage(w, ["x"], [0], [4], [4], seed=7)
    _wait(lambda: not w.accepting)
    assert "Errno" in w.stop_reason or "ENOTDIR" in w.stop_reason or "EEXIST" in w.stop_reason
    _wait(lambda: w.budget.used == 0)
    w.close()
    assert read_manifest(tmp_path) == {}


def test_when_the_server_dies_the_child_starts_nothing_new_and_exits(tmp_path):
    """The restarted server re-dumps what the manifest lacks; a late write from the old child racing it
    would list a sample twice, so the child only lets the files already being written finish."""
    w = _writer(tmp_path)
    _stage(w, ["done1"], [0], [5], [5], seed=8)
    _wait(lambda: w.is_done("done1"))
    _stage(w, ["half"], [0], [2], [6], seed=9)
    _wait(lambda: w._child_received == 2)
    w._closing = True
    w._sock.shutdown(socket.SHUT_RDWR)  # what the server's death looks like to the child
    assert w._proc.wait(30) == 0
    assert set(read_manifest(tmp_path)) == {"done1"}


def test_an_aborted_request_gives_its_shared_memory_back(tmp_path):
    """A request aborted mid-prefill, stitched in the child, is released there once the next
    batches no longer carry it; its ring region and budget come back in the server."""
    from sglang_eagle3_ext.in_server.dump.assemble import STALE_BATCHES

    w = _writer(tmp_path)
    _stage(w, ["dead", "a"], [0, 0], [4, 3], [100, 3], seed=1)
    for i in range(STALE_BATCHES):
        _stage(w, [f"b{i}"], [0], [3], [3], seed=2 + i)
    assert w.flush(30)
    _wait(lambda: w.budget.used == 0 and not w.staging._live)
    assert w.stats["ended_unfinished"] == 1
    w.close()
    assert set(read_manifest(tmp_path)) == {"a"} | {f"b{i}" for i in range(STALE_BATCHES)}


def test_a_stalled_wait_stops_the_child_too(tmp_path):
    """The forward thread's bounded wait (backpressure.STALL_S) ends dumping in the child as well: its status says so."""
    w = _writer(tmp_path)
    w.stop_stalled("test stall")
    assert not w.accepting and "test stall" in w.stop_reason
    _wait(lambda: json.loads((tmp_path / "status" / "dp0.json").read_text())["state"] == "stopped")
    w.close()
