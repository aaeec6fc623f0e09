"""The dump side: aborted requests, colliding ids, a stuck writer, a vanished dump dir, hostile
or mistyped paths given to export/status, layer lists that are not integers, a budget larger than the host.
Pure CPU, no SGLang; each test failed on the code before the fix."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time

import pytest
import torch
from dump_writer_fixtures import H, K, _meta, _short_samples_allowed  # noqa: F401 (autouse fixture)

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.cli.dump import main as dump_cli
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.export import ExportError
from sglang_eagle3_ext.dump.exporters.specforge import export_specforge
from sglang_eagle3_ext.dump.exporters.speculators import export_speculators
from sglang_eagle3_ext.dump.manifest import read_manifest, sanitize_id
from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, write_sample
from sglang_eagle3_ext.in_server.dump.assemble import STALE_BATCHES, ChunkBatch
from sglang_eagle3_ext.in_server.dump.staging import PinnedRing, region_size
from sglang_eagle3_ext.in_server.dump.writer.thread import DumpWriter


def _writer(root, **kw):
    return DumpWriter(C.DumpConfig(dump_dir=str(root), layers=(1, 2, 3), final="both", **kw), _meta(), name="dp0")


def _batch(rids, prefix, ext, orig, seed=0, ring: PinnedRing | None = None):
    """A ChunkBatch as the capture builds it; with `ring`, its host tensors live in a ring region that the
    writer must give back (as on a GPU server)."""
    T = sum(ext)
    g = torch.Generator().manual_seed(seed)
    src = {
        "ids": torch.cat([torch.arange(p, p + n) for p, n in zip(prefix, ext)]),
        "aux": torch.randn(K, T, H, generator=g),
        "pre": torch.randn(T, H, generator=g),
        "post": torch.randn(T, H, generator=g),
    }
    region = None
    if ring is not None:
        specs = [(tuple(t.shape), t.dtype) for t in src.values()]
        region = ring.alloc(region_size(specs))
        assert region is not None
        dst = dict(zip(src, ring.tensors(region, specs)))
        for k, t in src.items():
            dst[k].copy_(t)
        src = dst
    b = ChunkBatch(
        rids,
        prefix,
        ext,
        torch.tensor(orig),
        src["ids"],
        src["aux"],
        "list",
        pre=src["pre"],
        post=src["post"],
        nbytes=1000,
    )
    if region is not None:
        b.free_host = lambda: ring.free(region)
    return b


def _submit(w, *batches):
    for b in batches:
        w.reserve(b.nbytes)
        w.submit(b)


# ---- 1. requests that end unfinished ---------------------------------------------------------------
def test_aborted_mid_prefill_request_gives_back_ring_and_budget(tmp_path):
    """'dead' is aborted after its first chunk (client disconnect / abort_request): the next batches no
    longer carry it, so its host memory (ring region + budget) comes back and later batches fit the ring."""
    ring = PinnedRing(1 << 16, pin=False)
    w = _writer(tmp_path)
    _submit(w, _batch(["dead", "a"], [0, 0], [4, 3], [100, 3], seed=1, ring=ring))
    for i in range(STALE_BATCHES):
        _submit(w, _batch([f"b{i}"], [0], [3], [3], seed=2 + i, ring=ring))
    assert w.flush(30)
    assert w.budget.used == 0 and not ring._live, (w.budget.used, len(ring._live))
    assert w.stats["ended_unfinished"] == 1 and not w._asm.partials
    assert set(read_manifest(tmp_path)) == {"a"} | {f"b{i}" for i in range(STALE_BATCHES)}
    # a late chunk of the released request is refused with its cause, never written as a sample
    _submit(w, _batch(["dead"], [4], [4], [100], seed=9))
    assert w.flush(30) and w.stats["refused_other"] == 1 and w.budget.used == 0
    w.close()


def test_chunked_request_that_continues_is_kept(tmp_path):
    """The rule must not cut a live chunked prefill: its next chunk is in the next batch."""
    w = _writer(tmp_path)
    _submit(
        w,
        _batch(["long"], [0], [4], [12], seed=1),
        _batch(["long", "x"], [4, 0], [4, 2], [12, 2], seed=2),
        _batch(["long"], [8], [4], [12], seed=3),
    )
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"long", "x"} and w.stats["ended_unfinished"] == 0
    w.close()


def test_partials_released_when_no_batch_comes(tmp_path, monkeypatch):
    """The aborted request was the last traffic: after IDLE_RELEASE_S without a batch its memory comes back."""
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    monkeypatch.setattr(W, "STATUS_EVERY_S", 0.05)
    monkeypatch.setattr(W, "IDLE_RELEASE_S", 0.2)
    w = _writer(tmp_path)
    _submit(w, _batch(["dead"], [0], [4], [100], seed=1))
    t_end = time.monotonic() + 60  # ends at the release; the limit holds at load 8 on 2 cores
    while w.budget.used and time.monotonic() < t_end:
        time.sleep(0.05)
    assert w.budget.used == 0 and w.stats["ended_unfinished"] == 1

    def status():
        return json.loads((tmp_path / "status" / "dp0.json").read_text())["stats"]

    # the status file is rewritten every STATUS_EVERY_S: the one written just before the release may still be there
    while status()["pending_bytes"] and time.monotonic() < t_end:
        time.sleep(0.05)
    assert status()["pending_bytes"] == 0 and status()["partials"] == 0
    w.close()


def test_reserve_never_waits_forever_on_a_stuck_writer(tmp_path, monkeypatch):
    """Storage that never answers: the forward thread gives up after the stall limit, dumping stops loudly,
    serving goes on (the old code waited in a loop for ever: the server hung)."""
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    gate = threading.Event()
    real = W.write_sample
    monkeypatch.setattr(W, "write_sample", lambda *a, **k: gate.wait(60) and real(*a, **k))
    w = _writer(tmp_path, max_pending_bytes=1500)
    w.budget.stall_s = 0.5
    _submit(w, _batch(["a"], [0], [3], [3]))  # its write never finishes
    result = []
    t = threading.Thread(target=lambda: result.append(w.reserve(1000)), daemon=True)
    t.start()
    t.join(60)  # returns after the 0.5 s stall limit; blocked forever without it
    gate.set()
    assert not t.is_alive(), "reserve() blocked the forward thread"
    assert result == [False] and not w.accepting and "no host memory" in w.stop_reason
    w.close()


# ---- 2. ids that collide after sanitising; one sample's error ---------------------------------------
def test_rids_sanitising_to_one_id_dump_once_and_keep_the_writer(tmp_path):
    twin = sanitize_id("x/y")
    assert twin != "x/y" and sanitize_id(twin) == twin
    w = _writer(tmp_path)
    _submit(w, _batch(["x/y", twin], [0, 0], [3, 4], [3, 4], seed=1))
    assert w.flush(30)
    assert w.accepting, w.stop_reason
    assert w.stats["written"] == 1 and w.stats["refused_duplicate_id"] == 1
    lines = (tmp_path / "manifests" / "dp0.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [twin]
    _submit(w, _batch(["later"], [0], [3], [3], seed=2))
    assert w.flush(30) and "later" in read_manifest(tmp_path) and w.budget.used == 0
    w.close()


def test_a_chunked_duplicate_is_refused_once_and_the_first_completes(tmp_path):
    twin = sanitize_id("p/q")
    w = _writer(tmp_path)
    _submit(
        w, _batch(["p/q", twin], [0, 0], [3, 3], [6, 6], seed=1), _batch(["p/q", twin], [3, 3], [3, 3], [6, 6], seed=2)
    )
    assert w.flush(30)
    assert w.stats["refused_duplicate_id"] == 1 and w.stats["refused_prefix_cache"] == 0
    man = read_manifest(tmp_path)
    assert list(man) == [twin] and man[twin]["rid"] == "p/q" and man[twin]["num_tokens"] == 6
    assert w.budget.used == 0
    w.close()


def test_one_samples_write_error_does_not_stop_the_writer(tmp_path, monkeypatch):
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    real = W.write_sample

    def flaky(path, tensors, meta, **k):
        if meta["rid"] == "bad":
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        return real(path, tensors, meta, **k)

    monkeypatch.setattr(W, "write_sample", flaky)
    w = _writer(tmp_path)
    _submit(w, _batch(["bad", "good"], [0, 0], [3, 3], [3, 3]), _batch(["after"], [0], [3], [3], seed=3))
    assert w.flush(30)
    assert w.accepting, w.stop_reason
    assert set(read_manifest(tmp_path)) == {"good", "after"} and w.stats["write_errors"] == 1
    assert w.budget.used == 0
    w.close()


def test_a_sample_error_on_every_sample_still_stops(tmp_path, monkeypatch):
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    monkeypatch.setattr(W, "write_sample", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad tensor")))
    w = _writer(tmp_path, io_threads=1)
    for i in range(W.MAX_CONSECUTIVE_ERRORS):
        _submit(w, _batch([f"r{i}"], [0], [3], [3], seed=i))
    assert w.flush(30)
    assert not w.accepting and "in a row" in w.stop_reason
    w.close()


# ---- 12. the dump dir removed or replaced while serving ------------------------------------------
def test_dump_dir_replaced_while_serving_stops_dumping(tmp_path, monkeypatch):
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    monkeypatch.setattr(W, "STATUS_EVERY_S", 0.05)
    root = tmp_path / "dump"
    root.mkdir()
    w = _writer(root)
    _submit(w, _batch(["a"], [0], [3], [3]))
    assert w.flush(30)
    os.rename(root, tmp_path / "dump.old")
    shutil.copytree(tmp_path / "dump.old", root)  # same layout, another directory
    time.sleep(0.3)
    _submit(w, _batch(["b"], [0], [3], [3], seed=1))
    assert w.flush(30)
    assert not w.accepting and "replaced" in w.stop_reason
    assert "b" not in read_manifest(root) and "b" not in read_manifest(tmp_path / "dump.old")
    assert w.budget.used == 0
    w.close()


def test_dump_dir_removed_while_serving_says_so(tmp_path):
    root = tmp_path / "dump"
    root.mkdir()
    w = _writer(root)
    _submit(w, _batch(["a"], [0], [3], [3]))
    assert w.flush(30)
    shutil.rmtree(root)
    _submit(w, _batch(["b"], [0], [3], [3], seed=1))
    assert w.flush(30)
    assert not w.accepting and "removed" in w.stop_reason
    w.close()


# ---- 5/6/7. export and status: paths ----------------------------------------------------------------
def _dump(tmp_path, n=3, name="dump"):
    d = tmp_path / name
    d.mkdir()
    w = _writer(d)
    for i in range(n):
        _submit(w, _batch([f"s{i}"], [0], [3 + i], [3 + i], seed=i))
    assert w.flush(30)
    w.close()
    return d


def _foreign_sample(path):
    L = 4
    write_sample(
        path,
        {T_IDS: torch.arange(L), T_AUX: torch.randn(L, K * H), T_PRE: torch.randn(L, H), T_POST: torch.randn(L, H)},
        {"num_tokens": L},
    )


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_export_reads_nothing_outside_the_dump_dir(tmp_path, how):
    d = _dump(tmp_path, n=1)
    outside = tmp_path / "secret.safetensors"
    _foreign_sample(outside)
    if how == "symlink":
        os.symlink(outside, d / "samples" / "link.safetensors")
        entry = "samples/link.safetensors"
    else:
        entry = str(outside) if how == "absolute" else "../secret.safetensors"
    with open(d / "manifests" / "evil.jsonl", "w") as fh:
        fh.write(json.dumps({"id": "zz", "file": entry, "num_tokens": 4}) + "\n")
    for fn in (export_specforge, lambda a, b: export_speculators(a, b, arrow=False)):
        with pytest.raises(ExportError, match="outside the dump dir"):
            fn(d, tmp_path / "out")
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cmd", ["status", "export"])
@pytest.mark.parametrize("where", ["missing", "empty", "file"])
def test_export_and_status_of_a_non_dump_dir_are_errors(tmp_path, capsys, cmd, where):
    p = tmp_path / "typo"
    if where == "empty":
        p.mkdir()
    elif where == "file":
        p.write_text("x")
    extra = ["--to", "specforge", "--out", str(tmp_path / "out")] if cmd == "export" else []
    try:
        rc = dump_cli([cmd, "--dump-dir", str(p), *extra])
    except SystemExit as e:  # a path of the wrong kind is refused while the command line is parsed
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(p) in err[0] and "error: " in err[0], err  # one line: `PROG: error: ...`
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fn", [export_speculators, export_specforge])
def test_export_replaces_an_older_larger_export_whole(tmp_path, fn):
    d = _dump(tmp_path, n=3)
    out = tmp_path / "out"
    kw = {"arrow": False} if fn is export_speculators else {}
    assert fn(d, out, **kw) == 3
    assert fn(d, out, order=["s0", "s1"], **kw) == 2
    files = sorted(p.name for p in out.rglob("*") if p.is_file() and p.name.startswith(("hs_", "data_")))
    assert files == (
        ["hs_0.safetensors", "hs_1.safetensors"] if fn is export_speculators else ["data_0.ckpt", "data_1.ckpt"]
    )
    assert len((out / "index.jsonl").read_text().splitlines()) == 2
    assert not [p for p in tmp_path.iterdir() if ".export-" in p.name]  # no temporary left beside it


def test_export_refuses_a_foreign_non_empty_out_and_the_dump_dir_itself(tmp_path):
    d = _dump(tmp_path, n=1)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    with pytest.raises(ExportError, match="not empty"):
        export_specforge(d, out)
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]
    for bad in (d, tmp_path, d / "sub"):
        with pytest.raises(ExportError, match="outside the dump dir"):
            export_specforge(d, bad)
    assert (d / "dump_meta.json").exists() and read_manifest(d)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_specforge(d, empty) == 1  # an empty --out is fine


# ---- 8. layer lists --------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["1,,2", "1_0", "\u0661,\u0662", "1.9,2.9", "-1,2", "1,2,", "0x1", "1 2"])
def test_env_layers_only_ascii_integers(text):
    with pytest.raises(C.DumpConfigError, match=C.ENV_LAYERS):
        C.parse_layers(text)


def test_env_layers_accepts_the_plain_forms():
    assert C.parse_layers(" 2, 30 ,58 ") == (2, 30, 58) and C.parse_layers("") is None


@pytest.mark.parametrize("value", [[1.9, 2.9, 3.9], [1, 2.0], [True, 2], ["1", "2"], [-1, 2], [], 3, "1,,2"])
def test_preset_dump_layers_only_integers(value, tmp_path):
    from sglang_eagle3_ext.launch.presets import PresetError, ext_env

    with pytest.raises(PresetError, match="dump_layers"):
        ext_env({"dump_layers": value}, tmp_path)
    assert ext_env({"dump_layers": [2, 30, 58]}, tmp_path)[C.ENV_LAYERS] == "2,30,58"


# ---- upper bound of the host budget -----------------------------------------------------------------
def test_pending_budget_above_host_memory_is_an_error_naming_the_variable(tmp_path):
    mem = C.host_memory_bytes()
    assert mem and mem > 1 << 20
    too_much = str((mem >> 20) + 1024)
    with pytest.raises(C.DumpConfigError, match=C.ENV_MAX_PENDING_MB):
        C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_MAX_PENDING_MB: too_much})
    assert C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_MAX_PENDING_MB: "64"}).max_pending_bytes == 64 << 20
    # unset on a small machine: the default shrinks to a quarter of it instead of failing
    assert C.pending_budget_bytes({}, memory=1 << 30) == 256 << 20
