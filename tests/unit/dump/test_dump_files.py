"""Dump ids, manifest, atomic writes, writer failure handling, config: pure CPU, no SGLang."""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch
from helpers import _short_samples_allowed  # noqa: F401 (autouse fixture)

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.manifest import ManifestWriter, read_manifest, sample_path, sanitize_id
from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, read_sample, write_sample
from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError, DumpWriter

H, K = 8, 3


@pytest.mark.parametrize(
    "raw",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "..",
        ".",
        "a/../../b",
        "\x00evil",
        "..\\..\\x",
        "~root",
        "a" * 500,
        "",
        "ünï/cødé",
        ".hidden",
        "C:\\Windows\\x",
    ],
)
def test_ids_never_leave_dump_dir(tmp_path, raw):
    p = sample_path(tmp_path, raw)
    assert tmp_path.resolve() in p.parents
    assert "/" not in sanitize_id(raw) and "\\" not in sanitize_id(raw)
    assert not sanitize_id(raw).startswith(".") and len(sanitize_id(raw)) <= 120


def test_ids_stable_and_distinct():
    assert sanitize_id("sample-0001.v2_x") == "sample-0001.v2_x"  # safe ids unchanged (client and server agree)
    assert sanitize_id("a/b") != sanitize_id("a_b")  # rewriting never merges two ids
    assert sanitize_id("a/b") == sanitize_id("a/b")


def test_config_env(tmp_path):
    assert C.from_env({}) is None
    cfg = C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_LAYERS: "1, 5,9"})
    assert cfg.layers == (1, 5, 9) and cfg.final == "prenorm"
    assert C.from_env({envs.DUMP_DIR: str(tmp_path)}).resolve_layers(61) == [2, 30, 58]
    assert C.from_env({envs.DUMP_DIR: str(tmp_path)}).resolve_layers(4) == [1, 2, 3]  # draft/layers.py's
    with pytest.raises(C.DumpConfigError, match="out of range"):
        cfg.resolve_layers(4)
    with pytest.raises(C.DumpConfigError, match="final hidden state"):
        C.from_env({envs.DUMP_DIR: "x", C.ENV_LAYERS: "1,4"}).resolve_layers(4)
    with pytest.raises(C.DumpConfigError, match="integers"):
        C.from_env({envs.DUMP_DIR: "x", C.ENV_LAYERS: "1,two"})
    with pytest.raises(C.DumpConfigError, match="expected one of 'prenorm'"):
        C.from_env({envs.DUMP_DIR: "x", C.ENV_FINAL: "pickle"})
    with pytest.raises(C.DumpConfigError, match="increasing"):
        C.from_env({envs.DUMP_DIR: "x", C.ENV_LAYERS: "3,1"}).resolve_layers(10)
    assert (
        C.from_env({envs.DUMP_DIR: "x"}).copy_stream
        and not C.from_env({envs.DUMP_DIR: "x", C.ENV_COPY_STREAM: "0"}).copy_stream
    )
    with pytest.raises(C.DumpConfigError, match="COPY_STREAM"):
        C.from_env({envs.DUMP_DIR: "x", C.ENV_COPY_STREAM: "maybe"})
    from sglang_eagle3_ext.patch_table import features_from_env

    assert "dump" in features_from_env({envs.DUMP_DIR: "/x"})


def test_manifest_torn_line_and_append(tmp_path):
    m = ManifestWriter(tmp_path, "dp0")
    m.append({"id": "a", "file": "samples/x/a.safetensors"})
    m.close()
    with open(tmp_path / "manifests" / "dp0.jsonl", "ab") as fh:
        fh.write(b'{"id": "b", "fi')  # crash mid-append
    assert set(read_manifest(tmp_path)) == {"a"}
    m = ManifestWriter(tmp_path, "dp0")  # reopening must not glue the next record to the torn one
    m.append({"id": "c", "file": "samples/x/c.safetensors"})
    m.close()
    ManifestWriter(tmp_path, "dp1").append({"id": "d", "file": "f"})
    assert set(read_manifest(tmp_path)) == {"a", "c", "d"}


def test_atomic_write_failure_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "s" / "x.safetensors"

    def boom(src, dst):
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_sample(target, {"a": torch.ones(3)}, {"k": 1})
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_sample_roundtrip_metadata(tmp_path):
    t = {T_IDS: torch.arange(5), T_AUX: torch.randn(5, K * H).bfloat16()}
    write_sample(tmp_path / "a.safetensors", t, {"layer_indices_hf": [1, 2, 3]})
    got, meta = read_sample(tmp_path / "a.safetensors")
    assert meta["layer_indices_hf"] == [1, 2, 3] and torch.equal(got[T_AUX], t[T_AUX])
    with open(tmp_path / "a.safetensors", "rb") as fh:  # safetensors: JSON header, never a pickle
        n = int.from_bytes(fh.read(8), "little")
        assert json.loads(fh.read(n))["__metadata__"]["sge3_dump"]


# ---- writer ---------------------------------------------------------------------------------------
def _meta():
    return {
        "layer_indices_hf": [1, 2, 3],
        "hidden_size": H,
        "num_hidden_layers": 4,
        "architecture": "DeepseekV3ForCausalLM",
        "final": "both",
        "dtype": "float32",
    }


def _batch(rids, prefix, ext, orig, seed=0, packed=False, nan=False):
    T = sum(ext)
    g = torch.Generator().manual_seed(seed)
    aux = torch.randn(T, K * H, generator=g) if packed else torch.randn(K, T, H, generator=g)
    post = torch.randn(T, H, generator=g)
    if nan:
        post[0, 0] = float("nan")
    ids = torch.cat([torch.arange(p, p + n) for p, n in zip(prefix, ext)])
    return ChunkBatch(
        rids,
        prefix,
        ext,
        torch.tensor(orig),
        ids,
        aux,
        "packed" if packed else "list",
        pre=torch.randn(T, H, generator=g),
        post=post,
        nbytes=1000,
    )


def _submit(w, *batches):
    for b in batches:  # as the capture hook does: reserve host memory, then hand over
        w.reserve(b.nbytes)
        w.submit(b)


def _writer(tmp_path, **kw):
    cfg = C.DumpConfig(dump_dir=str(tmp_path), layers=(1, 2, 3), final="both", **kw)
    return DumpWriter(cfg, _meta(), name="dp0")


def test_writer_startup_errors(tmp_path):
    with pytest.raises(DumpStartupError, match="does not exist"):
        DumpWriter(C.DumpConfig(str(tmp_path / "missing"), None), _meta())
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        unwritable = "/proc" if os.access(ro, os.W_OK) else str(ro)  # root ignores mode bits; /proc refuses files
        with pytest.raises(DumpStartupError, match="not writable"):
            DumpWriter(C.DumpConfig(unwritable, None), _meta())
    finally:
        ro.chmod(0o700)
    w = _writer(tmp_path)
    w.close()
    other = {**_meta(), "layer_indices_hf": [0, 1, 2]}
    with pytest.raises(DumpStartupError, match="different settings"):
        DumpWriter(C.DumpConfig(str(tmp_path), None), other)


def test_writer_start_removes_only_its_own_leftover_temporaries(tmp_path):
    """A killed run leaves `.NAME.tmpdp0.N.PID` files in the shard folders: the next dp0 writer removes
    those (never listed in a manifest) and leaves other writers' temporaries and every sample alone."""
    shard = tmp_path / C.SAMPLES_DIR / "ab"
    shard.mkdir(parents=True)
    mine, theirs = shard / ".s1.safetensors.tmpdp0.3.999", shard / ".s2.safetensors.tmpdp1.0.999"
    sample = shard / "s3.safetensors"
    for p in (mine, theirs, sample):
        p.write_bytes(b"x")
    _writer(tmp_path).close()
    assert not mine.exists() and theirs.exists() and sample.exists()


def test_writer_stitches_chunks_and_resumes(tmp_path):
    w = _writer(tmp_path)
    # r1: 10 tokens in chunks 4+6; r2: 3 tokens in one go; nodump-: never written
    b1 = _batch(["r1", "nodump-x"], [0, 0], [4, 2], [10, 2], seed=1)
    b2 = _batch(["r1", "r2"], [4, 0], [6, 3], [10, 3], seed=2, packed=True)
    _submit(w, b1, b2)
    assert w.flush(30)
    man = read_manifest(tmp_path)
    assert set(man) == {"r1", "r2"}
    t, meta = read_sample(tmp_path / man["r1"]["file"])
    assert t[T_IDS].tolist() == list(range(10)) and meta["num_tokens"] == 10
    exp_aux = torch.cat([b1.aux[:, 0:4].transpose(0, 1).reshape(4, -1), b2.aux[0:6]])
    assert torch.equal(t[T_AUX], exp_aux)
    assert torch.equal(t[T_POST], torch.cat([b1.post[:4], b2.post[:6]]))
    assert torch.equal(t[T_PRE], torch.cat([b1.pre[:4], b2.pre[:6]]))
    assert w.budget.used == 0  # every host buffer released
    w.close()
    w2 = _writer(tmp_path)  # restart: manifest ids are done, not rewritten
    assert w2.is_done("r1")
    _submit(w2, _batch(["r1"], [0], [10], [10], seed=9))
    assert w2.flush(30) and w2.stats["written"] == 0
    assert torch.equal(read_sample(tmp_path / man["r1"]["file"])[0][T_POST], t[T_POST])
    w2.close()


def test_discard_mode_stitches_and_counts_but_writes_nothing(tmp_path):
    """The benchmarking aid: the same capture and stitching, no sample file, no manifest line, every host
    buffer back, and the status file says so (the dump client refuses such a server)."""
    w = _writer(tmp_path, discard=True)
    _submit(w, _batch(["r1"], [0], [4], [10], seed=1), _batch(["r1", "r2"], [4, 0], [6, 3], [10, 3], seed=2))
    assert w.flush(30)
    assert w.stats["discarded"] == 2 and w.stats["written"] == 0 and w.budget.used == 0
    assert read_manifest(tmp_path) == {} and not list((tmp_path / "samples").rglob("*.safetensors"))
    assert json.loads((tmp_path / "status" / "dp0.json").read_text())["state"] == "discarding"
    w.close()
    assert C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_DISCARD: "1"}).discard
    assert not C.from_env({envs.DUMP_DIR: str(tmp_path)}).discard
    with pytest.raises(C.DumpConfigError, match=C.ENV_DISCARD):
        C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_DISCARD: "maybe"})


def test_writer_refuses_prefix_cache_and_nan(tmp_path):
    w = _writer(tmp_path)
    _submit(w, _batch(["cached"], [5], [3], [8]))  # head served by the radix cache
    _submit(w, _batch(["bad"], [0], [4], [4], nan=True))
    assert w.flush(30)
    assert read_manifest(tmp_path) == {}
    assert w.stats["refused_prefix_cache"] == 1 and w.stats["nonfinite"] == 1 and w.budget.used == 0
    assert not list((tmp_path / "samples").rglob("*.safetensors"))
    w.close()


def test_writer_disk_full_stops_and_keeps_manifest_consistent(tmp_path, monkeypatch):
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    w = _writer(tmp_path)
    _submit(w, _batch(["ok"], [0], [3], [3]))
    assert w.flush(30)
    real = W.write_sample
    calls = []

    def full(path, *a, **k):
        calls.append(path)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(W, "write_sample", full)
    _submit(w, _batch(["x1"], [0], [3], [3]))
    assert w.flush(30)
    assert not w.accepting and "ENOSPC" in w.stop_reason
    monkeypatch.setattr(W, "write_sample", real)
    _submit(w, _batch(["x2"], [0], [3], [3]))  # after stopping: accepted by nobody, memory released
    assert w.flush(30) and w.budget.used == 0
    assert set(read_manifest(tmp_path)) == {"ok"}
    status = json.loads((tmp_path / "status" / "dp0.json").read_text())
    assert status["state"] == "stopped" and "ENOSPC" in status["error"]
    w.close()


def test_budget_backpressure_blocks_not_drops(tmp_path, monkeypatch):
    import threading
    import time

    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    gate = threading.Event()
    real = W.write_sample

    def slow(*a, **k):
        gate.wait(10)
        return real(*a, **k)

    monkeypatch.setattr(W, "write_sample", slow)
    w = _writer(tmp_path, max_pending_bytes=1500)
    _submit(w, _batch(["a"], [0], [3], [3]))  # 1000 bytes held until the gate opens
    t0 = time.monotonic()
    threading.Timer(0.5, gate.set).start()
    _submit(w, _batch(["b"], [0], [3], [3]))  # its reserve must wait for "a" to be written
    assert time.monotonic() - t0 >= 0.4
    assert w.flush(30) and set(read_manifest(tmp_path)) == {"a", "b"} and w.budget.used == 0
    assert w.budget.waited_s >= 0.4
    w.close()


def test_warmup_sized_prompts_are_not_dumped(tmp_path, monkeypatch):
    """SGLang's own warm-up request (3 tokens, random rid) must not become a training sample."""
    monkeypatch.delenv("SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS")
    w = _writer(tmp_path)
    _submit(w, _batch(["0bdf8dadee0d48b1989bbdc813748720", "real"], [0, 0], [3, 12], [3, 12]))
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"real"}
    w.close()


def test_min_tokens_bad_value_is_a_start_up_error(tmp_path, monkeypatch):
    monkeypatch.setenv(envs.DUMP_DIR, str(tmp_path))
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS", "eight")
    with pytest.raises(C.DumpConfigError, match="SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS"):
        C.from_env()


def test_status_file_follows_the_counters_during_a_run(tmp_path, monkeypatch):
    """`dump status` during a long run must show skips as they happen, not only after close()."""
    import time

    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    monkeypatch.setattr(W, "STATUS_EVERY_S", 0.05)
    w = _writer(tmp_path)
    _submit(w, _batch(["ok"], [0], [4], [4]), _batch(["bad"], [0], [4], [4], nan=True))
    assert w.flush(30)
    path = tmp_path / "status" / "dp0.json"
    deadline = time.monotonic() + 60  # ends at the first fresh status; the limit holds at load 8 on 2 cores
    while time.monotonic() < deadline:
        st = json.loads(path.read_text())
        if st["stats"]["written"] == 1 and st["stats"]["nonfinite"] == 1:
            break
        time.sleep(0.05)
    assert st["state"] == "dumping" and st["stats"]["written"] == 1 and st["stats"]["nonfinite"] == 1, st
    w.close()
    assert json.loads(path.read_text())["state"] == "closed"


def test_steady_state_sample_writes_make_no_path_syscalls(tmp_path, monkeypatch):
    """Each syscall of an io thread is a GIL hand-off with SGLang's forward thread: once a shard dir is
    known, writing a sample resolves no path and makes no directory."""
    from sglang_eagle3_ext.dump import manifest as M

    ids = [
        f"r{i}" for i in range(400) if M.sample_relpath(f"r{i}").split("/")[1] == M.sample_relpath("r0").split("/")[1]
    ]
    w = _writer(tmp_path)
    _submit(w, _batch([ids[0]], [0], [3], [3]))  # first of its shard: resolves and makes the dir
    assert w.flush(30)
    calls = []
    for name in ("lstat", "stat", "mkdir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    _submit(w, _batch([ids[1]], [0], [3], [3]))  # same shard
    assert w.flush(30)
    monkeypatch.undo()
    assert set(read_manifest(tmp_path)) == set(ids[:2])
    assert calls == [], calls
    w.close()
