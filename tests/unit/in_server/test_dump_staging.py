"""The dump's host-side fast paths: the staging ring, the direct safetensors writer, the group-committed
manifest. Pure CPU, no SGLang."""

from __future__ import annotations

import errno
import os
import random
import threading

import pytest
import torch

from sglang_eagle3_ext.dump.manifest import ManifestWriter, read_manifest
from sglang_eagle3_ext.dump.sample_file import read_sample, save_safetensors, write_sample
from sglang_eagle3_ext.in_server.dump.staging import ALIGN, PinnedRing, region_size


@pytest.mark.parametrize("seed", range(5))
def test_ring_regions_never_overlap_and_all_come_back(seed):
    rng = random.Random(seed)
    ring = PinnedRing(64 * ALIGN, pin=False)
    live = []
    for _ in range(2000):
        if live and (rng.random() < 0.45 or len(live) > 20):
            ring.free(live.pop(rng.randrange(len(live))))  # out of order, as io threads finish
            continue
        r = ring.alloc(rng.randint(1, 20 * ALIGN))
        if r is None:
            continue
        assert 0 <= r.start < r.end <= ring.capacity and r.start % ALIGN == 0
        for o in live:
            assert r.end <= o.start or o.end <= r.start, "two live regions share bytes"
        live.append(r)
    assert ring.allocated > 500 and ring.fallbacks > 0  # it wrapped, filled up, and recovered
    for r in live:
        ring.free(r)
    assert not ring._live and ring.alloc(ring.capacity) is not None  # all of it is free again


def test_ring_refuses_what_cannot_fit_instead_of_overwriting():
    ring = PinnedRing(8 * ALIGN, pin=False)
    a = ring.alloc(5 * ALIGN)
    assert ring.alloc(4 * ALIGN) is None  # only 3 left at the end, nothing before a
    b = ring.alloc(3 * ALIGN)
    assert b.start == 5 * ALIGN and ring.alloc(1) is None  # full
    ring.free(a)
    c = ring.alloc(5 * ALIGN)  # wraps into a's bytes, not b's
    assert c.start == 0 and ring.alloc(1) is None
    assert ring.alloc(9 * ALIGN) is None and ring.fallbacks == 4


def test_ring_views_hold_their_own_bytes():
    ring = PinnedRing(1 << 16, pin=False)
    specs = [((5,), torch.int64), ((3, 7), torch.bfloat16), ((2, 3), torch.float32)]
    r = ring.alloc(region_size(specs))
    ts = ring.tensors(r, specs)
    for i, t in enumerate(ts):
        t.fill_(i + 1)
    assert [t.shape for t in ts] == [torch.Size(s) for s, _ in specs] and [t.dtype for t in ts] == [d for _, d in specs]
    assert all(bool((t == i + 1).all()) for i, t in enumerate(ts))


@pytest.mark.parametrize("write_max", [None, 7])  # 7: every buffer written in pieces (the >1 GiB path)
def test_direct_safetensors_file_reads_back_with_safetensors(tmp_path, monkeypatch, write_max):
    from safetensors import safe_open

    import sglang_eagle3_ext.dump.sample_file as F

    if write_max:
        monkeypatch.setattr(F, "_WRITE_MAX", write_max)

    t = {
        "ids": torch.arange(7),
        "bf": torch.randn(3, 5).bfloat16(),
        "strided": torch.randn(4, 6)[:, ::2],
        "flag": torch.tensor(True),
        "empty": torch.empty(0, 4),
        "f8": torch.randn(2, 3).to(torch.float8_e4m3fn),
    }
    save_safetensors(tmp_path / "x.safetensors", t, {"k": "v"})
    with safe_open(str(tmp_path / "x.safetensors"), "pt") as f:
        assert f.metadata() == {"k": "v"}
        for k, v in t.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape and torch.equal(got.float(), v.float()), k
    assert write_sample(tmp_path / "s.safetensors", {"a": t["bf"]}, {"n": 1}) == os.path.getsize(
        tmp_path / "s.safetensors"
    )
    tensors, meta = read_sample(tmp_path / "s.safetensors")
    assert meta == {"n": 1} and torch.equal(tensors["a"], t["bf"])


def test_group_commit_lists_every_record_once_under_concurrency(tmp_path):
    m = ManifestWriter(tmp_path, "dp0")
    d = tmp_path / "samples"
    d.mkdir()

    def one(i):
        m.append({"id": f"s{i}", "file": f"samples/s{i}"}, sync_dir=d)

    ths = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    m.close()
    assert set(read_manifest(tmp_path)) == {f"s{i}" for i in range(64)}
    assert len((tmp_path / "manifests" / "dp0.jsonl").read_text().splitlines()) == 64


def test_group_commit_failure_reaches_every_waiter_of_that_commit(tmp_path, monkeypatch):
    import sglang_eagle3_ext.dump.manifest as M

    m = ManifestWriter(tmp_path, "dp0")
    gate, entered = threading.Event(), threading.Event()
    real = M.fsync_dir

    def stuck_then_full(p):  # the first commit blocks while others queue up, then the disk is full
        entered.set()
        gate.wait(10)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(M, "fsync_dir", stuck_then_full)
    errors = []

    def one(i):
        try:
            m.append({"id": f"s{i}", "file": "f"}, sync_dir=tmp_path)
        except OSError as e:
            errors.append(e.errno)

    first = threading.Thread(target=one, args=(0,))
    first.start()
    assert entered.wait(60)  # the waits end as soon as the threads do; the limits hold at load 8 on 2 cores
    rest = [threading.Thread(target=one, args=(i,)) for i in range(1, 6)]
    for t in rest:
        t.start()
    gate.set()
    for t in [first, *rest]:
        t.join(60)
    monkeypatch.setattr(M, "fsync_dir", real)
    assert errors == [errno.ENOSPC] * 6  # nobody believes its line was written
    assert read_manifest(tmp_path) == {}
    m.close()


def test_rows_finite_flags_mark_exactly_the_bad_rows():
    from sglang_eagle3_ext.in_server.dump.copy import rows_finite as _rows_finite

    a, b = torch.randn(6, 8).bfloat16(), torch.randn(6, 4)
    a[1, 3], b[4, 0], b[5, 2] = float("nan"), float("inf"), -float("inf")
    assert _rows_finite([a, b]).tolist() == [True, False, True, True, False, False]
    assert _rows_finite([a[2:4], b[2:4]]).tolist() == [True, True]  # views of the batch's rows


def test_writer_uses_the_capture_flags_per_sample(tmp_path):
    """Two requests in one batch: the capture's flags mark a row of the second as non-finite; only it is
    skipped (and counted), with no pass over the bytes on the io thread."""
    from sglang_eagle3_ext.dump import config as C
    from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
    from sglang_eagle3_ext.in_server.dump.writer.thread import DumpWriter

    meta = {
        "layer_indices_hf": [1, 2, 3],
        "hidden_size": 8,
        "num_hidden_layers": 4,
        "architecture": "DeepseekV3ForCausalLM",
        "final": "both",
        "dtype": "float32",
    }
    w = DumpWriter(C.DumpConfig(dump_dir=str(tmp_path), layers=(1, 2, 3), final="both", min_tokens=1), meta)
    ok = torch.tensor([True] * 3 + [True, False, True, True])
    b = ChunkBatch(
        ["good", "bad"],
        [0, 0],
        [3, 4],
        torch.tensor([3, 4]),
        torch.arange(7),
        torch.randn(7, 24),
        "packed",
        pre=torch.randn(7, 8),
        post=torch.randn(7, 8),
        nbytes=100,
        row_ok=ok,
    )
    w.reserve(b.nbytes)
    w.submit(b)
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"good"} and w.stats["nonfinite"] == 1 and w.budget.used == 0
    w.close()


def test_ring_lives_on_the_host_under_a_default_device():
    """SGLang builds the model, and so the ring, under `with torch.device("cuda")`: the buffer and every
    view must still be host memory (on the GPU this was 'Only dense CPU tensors can be pinned')."""
    with torch.device("meta"):
        ring = PinnedRing(4 * ALIGN, pin=False)
        r = ring.alloc(ALIGN)
        views = ring.tensors(r, [((4, 8), torch.bfloat16), ((0,), torch.int64)])
    assert ring.buf.device.type == "cpu"
    assert [v.device.type for v in views] == ["cpu", "cpu"]
