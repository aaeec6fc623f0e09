"""Compact dump storage (SGLANG_EAGLE3_EXT_DUMP_ENCODING=fp8): codec error bounds, writer files and sizes,
metadata, transparent decoding by read_sample and both exporters, refusals. Pure CPU, no SGLang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers import _short_samples_allowed, cosine  # noqa: F401 (autouse fixture)

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.encoding import (
    FP8_ROWWISE,
    NATIVE,
    SCALE_SUFFIX,
    EncodingError,
    dequantize_rows,
    quantize_rows,
)
from sglang_eagle3_ext.dump.export import ExportError, rms_norm
from sglang_eagle3_ext.dump.exporters.specforge import export_specforge
from sglang_eagle3_ext.dump.exporters.speculators import export_speculators
from sglang_eagle3_ext.dump.manifest import read_manifest
from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, read_sample
from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError, DumpWriter

REPO = Path(__file__).resolve().parents[3]
H, K = 256, 3


# ---- config ---------------------------------------------------------------------------------------
def test_env_encoding_values_and_clear_error(tmp_path):
    assert C.from_env({envs.DUMP_DIR: str(tmp_path)}).encoding == "bf16"  # default: the native format
    assert C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_ENCODING: "fp8"}).encoding == "fp8"
    assert C.ENV_ENCODING == "SGLANG_EAGLE3_EXT_DUMP_ENCODING" and C.ENV_ENCODING in C.ALL_ENV
    for bad in ("int4", "fp16", "e4m3"):
        with pytest.raises(C.DumpConfigError) as ei:
            C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_ENCODING: bad})
        msg = str(ei.value)
        assert C.ENV_ENCODING in msg and repr(bad) in msg and "'bf16'" in msg and "'fp8'" in msg
    with pytest.raises(C.DumpConfigError, match="bf16"):
        C.DumpConfig(str(tmp_path), None, encoding="fp4")


# ---- codec ----------------------------------------------------------------------------------------
def test_roundtrip_gaussian_rows_error_bounds():
    g = torch.Generator().manual_seed(0)
    # per-layer magnitudes differ by 100x: each H-wide slice gets its own scale
    x = (torch.randn(200, K * H, generator=g) * torch.tensor([0.05, 1.0, 5.0]).repeat_interleave(H)).bfloat16()
    q, s = quantize_rows(x, K)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    assert s.dtype == torch.float32 and s.shape == (200, K)
    y = dequantize_rows(q, s, torch.bfloat16)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    xs, ys = x.float().view(200, K, H), y.float().view(200, K, H)
    cos = cosine(xs, ys)  # per token, per layer slice
    assert cos.min() >= 0.999, cos.min()
    assert cosine(x, y).min() >= 0.999
    # element bound: e4m3 round-to-nearest (3 mantissa bits: <= 2^-4 relative; subnormal step 2^-9 * scale)
    # plus the bf16 cast of the decoded value (2^-8 relative)
    err = (ys - xs).abs()
    bound = xs.abs() * (2**-4 + 2**-8) * 1.001 + s.unsqueeze(-1) * 2**-10 * 1.001
    assert bool((err <= bound).all()), (err - bound).max()
    # the largest magnitude of every slice maps to +-448 exactly: decodes to itself (up to the float ops)
    i = xs.abs().argmax(-1, keepdim=True)
    assert torch.allclose(ys.gather(-1, i), xs.gather(-1, i), rtol=2**-7)


def test_zero_rows_slices_and_elements_stay_zero():
    x = torch.randn(6, K * H).bfloat16()
    x[1] = 0  # whole token
    x[3, H : 2 * H] = 0  # one layer's slice of a token
    x[4, ::7] = 0  # scattered exact zeros inside a normal row
    x[5, 5] = -0.0
    q, s = quantize_rows(x, K)
    assert s[1].tolist() == [0.0, 0.0, 0.0] and s[3, 1] == 0 and bool((s[3, [0, 2]] > 0).all())
    y = dequantize_rows(q, s, torch.bfloat16)
    assert bool(torch.isfinite(y).all())
    assert bool((y[x == 0] == 0).all()) and bool((y[1] == 0).all())
    big = x.float().abs().view(6, K, H) > s.unsqueeze(-1) * 2**-9  # above the smallest fp8 step: never 0
    assert bool((y.view(6, K, H)[big] != 0).all())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_codec_refuses_nonfinite(bad):
    x = torch.randn(4, 2 * H)
    x[2, 7] = bad
    with pytest.raises(EncodingError, match="NaN/Inf"):
        quantize_rows(x, 2)


def test_long_sample_chunked_same_as_whole(monkeypatch):
    import sglang_eagle3_ext.dump.encoding as E

    x = torch.randn(50, 2 * H).bfloat16()
    q1, s1 = quantize_rows(x, 2)
    monkeypatch.setattr(E, "CHUNK_ROWS", 7)
    q2, s2 = quantize_rows(x, 2)
    assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(s1, s2)


# ---- writer ---------------------------------------------------------------------------------------
def _meta(final="both"):
    return {
        "layer_indices_hf": [1, 2, 3],
        "hidden_size": H,
        "num_hidden_layers": 4,
        "architecture": "DeepseekV3ForCausalLM",
        "final": final,
        "dtype": "bfloat16",
    }


def _batches(lens=(64, 48), final="both", seed=0, nan_in=None):
    g = torch.Generator().manual_seed(seed)
    weight = torch.rand(H, generator=g) + 0.5
    out = []
    for j, L in enumerate(lens):
        aux = torch.randn(K, L, H, generator=g).bfloat16()
        pre = (torch.randn(L, H, generator=g) * 3).bfloat16()
        post = rms_norm(pre, weight, 1e-6)
        if nan_in is not None and j == nan_in[0]:
            aux[1, 2, 3] = nan_in[1]
        out.append(
            ChunkBatch(
                [f"s{j}"],
                [0],
                [L],
                [L],
                torch.randint(0, 1000, (L,), generator=g),
                aux,
                "list",
                pre=pre if final != "postnorm" else None,
                post=post if final != "prenorm" else None,
                nbytes=10,
                norm=(weight, 1e-6) if j == 0 else None,
            )
        )
    return out


def _dump(root: Path, encoding: str, final="both", **kw) -> tuple[Path, DumpWriter]:
    root.mkdir(exist_ok=True)
    w = DumpWriter(C.DumpConfig(str(root), (1, 2, 3), final=final, encoding=encoding), _meta(final))
    for b in _batches(final=final, **kw):
        w.reserve(b.nbytes)
        w.submit(b)
    assert w.flush(30)
    w.close()
    return root, w


def test_fp8_files_half_size_metadata_and_decoding(tmp_path):
    bf, _ = _dump(tmp_path / "bf16", "bf16")
    f8, w = _dump(tmp_path / "fp8", "fp8")
    mb, m8 = read_manifest(bf), read_manifest(f8)
    assert set(mb) == set(m8) == {"s0", "s1"} and w.stats["written"] == 2
    ratio = sum(r["bytes"] for r in m8.values()) / sum(r["bytes"] for r in mb.values())
    assert ratio <= 0.55, ratio
    for sid in mb:  # the manifest's byte counts are the files on disk
        assert (f8 / m8[sid]["file"]).stat().st_size == m8[sid]["bytes"]
    dm = json.loads((f8 / C.META_FILE).read_text())
    assert dm["encoding"] == FP8_ROWWISE and dm["encoding_detail"]["scale_dtype"] == "float32"
    assert set(dm["encoding_detail"]["tensors"]) >= {T_AUX, T_PRE, T_POST}
    assert json.loads((bf / C.META_FILE).read_text())["encoding"] == NATIVE
    for sid in mb:
        tb, metab = read_sample(bf / mb[sid]["file"])
        raw, meta = read_sample(f8 / m8[sid]["file"], raw=True)
        assert meta["encoding"] == FP8_ROWWISE and metab["encoding"] == NATIVE
        assert set(meta["encoded"]) == {T_AUX, T_PRE, T_POST}
        assert meta["encoded"][T_AUX]["groups"] == K and meta["encoded"][T_AUX]["group_width"] == H
        assert all(r["scale_dtype"] == "float32" and r["dtype"] == "bfloat16" for r in meta["encoded"].values())
        L = tb[T_IDS].shape[0]
        assert raw[T_AUX].dtype == torch.float8_e4m3fn and raw[T_AUX + SCALE_SUFFIX].shape == (L, K)
        assert raw[T_PRE + SCALE_SUFFIX].shape == (L, 1) and raw[T_IDS].dtype == torch.int64
        t8, _ = read_sample(f8 / m8[sid]["file"])  # default: decoded, as captured
        assert set(t8) == set(tb) == {T_IDS, T_AUX, T_PRE, T_POST}
        assert torch.equal(t8[T_IDS], tb[T_IDS])
        for k in (T_AUX, T_PRE, T_POST):
            assert t8[k].dtype == tb[k].dtype == torch.bfloat16 and t8[k].shape == tb[k].shape
            assert not torch.equal(t8[k], tb[k])  # it really is the lossy copy
            c = cosine(t8[k].view(L, -1, H), tb[k].view(L, -1, H))
            assert c.min() >= 0.999, (k, c.min())


def test_encoding_runs_on_io_threads_not_the_caller(tmp_path, monkeypatch):
    import sglang_eagle3_ext.in_server.dump.writer.thread as W

    seen = []
    real = W.encode_sample

    def spy(*a, **k):
        seen.append(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(W, "encode_sample", spy)
    _dump(tmp_path / "d", "fp8")
    assert len(seen) == 2 and all(n.startswith("sge3-dump-io") for n in seen), seen


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_writer_skips_and_counts_nonfinite_in_fp8_mode(tmp_path, bad):
    d, w = _dump(tmp_path / "d", "fp8", nan_in=(0, bad))
    assert w.stats["nonfinite"] == 1 and w.stats["refused_other"] == 0 and w.stats["written"] == 1
    assert set(read_manifest(d)) == {"s1"} and w.budget.used == 0


def test_dump_dir_keeps_one_encoding(tmp_path):
    d, _ = _dump(tmp_path / "d", "bf16")
    with pytest.raises(DumpStartupError) as ei:
        DumpWriter(C.DumpConfig(str(d), (1, 2, 3), final="both", encoding="fp8"), _meta())
    msg = str(ei.value)
    assert "different settings" in msg and "encoding" in msg and FP8_ROWWISE in msg and C.ENV_ENCODING in msg
    DumpWriter(C.DumpConfig(str(d), (1, 2, 3), final="both"), _meta()).close()  # same encoding: resumes
    e, _ = _dump(tmp_path / "e", "fp8")
    with pytest.raises(DumpStartupError, match="encoding"):
        DumpWriter(C.DumpConfig(str(e), (1, 2, 3), final="both"), _meta())
    # a dump dir written before the encoding existed is native: bf16 resumes it, fp8 is refused
    mp = d / C.META_FILE
    old = json.loads(mp.read_text())
    old.pop("encoding")
    mp.write_text(json.dumps(old))
    DumpWriter(C.DumpConfig(str(d), (1, 2, 3), final="both"), _meta()).close()
    with pytest.raises(DumpStartupError, match="encoding"):
        DumpWriter(C.DumpConfig(str(d), (1, 2, 3), final="both", encoding="fp8"), _meta())


# ---- exporters ------------------------------------------------------------------------------------
def _spec_files(out: Path) -> dict:
    from safetensors.torch import load_file

    return {p.name: load_file(p) for p in sorted((out / "hidden_states").glob("*.safetensors"))}


def _sf_files(out: Path) -> dict:
    return {p.name: torch.load(p, weights_only=False) for p in sorted(out.rglob("*.ckpt"))}


def _same_layout(a: dict, b: dict, min_cos=0.999):
    assert set(a) == set(b) and a
    for name in a:
        assert set(a[name]) == set(b[name]), name
        for k in a[name]:
            x, y = a[name][k], b[name][k]
            assert x.dtype == y.dtype and x.shape == y.shape, (name, k, x.dtype, y.dtype, x.shape, y.shape)
            if x.is_floating_point():
                assert x.dtype == torch.bfloat16
                assert cosine(x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])).min() >= min_cos, (name, k)
            else:
                assert torch.equal(x, y)


@pytest.mark.parametrize("final", ["prenorm", "both"])
def test_exporters_same_shapes_and_dtypes_as_bf16(tmp_path, final):
    bf, _ = _dump(tmp_path / "bf16", "bf16", final=final)
    f8, _ = _dump(tmp_path / "fp8", "fp8", final=final)
    try:
        import datasets  # noqa: F401

        arrow = True
    except ImportError:
        arrow = False
    for src in (bf, f8):
        assert export_speculators(src, tmp_path / f"spec-{src.name}", arrow=arrow) == 2
        assert export_specforge(src, tmp_path / f"sf-{src.name}") == 2
    _same_layout(_spec_files(tmp_path / "spec-bf16"), _spec_files(tmp_path / "spec-fp8"))
    _same_layout(_sf_files(tmp_path / "sf-bf16"), _sf_files(tmp_path / "sf-fp8"))
    hs = _spec_files(tmp_path / "spec-fp8")["hs_0.safetensors"]["hidden_states"]
    assert hs.shape == (64, K + 1, H) and hs.dtype == torch.bfloat16
    if arrow and final == "prenorm":
        pytest.importorskip("speculators")
        from speculators.train.data import ArrowDataset

        ds = ArrowDataset(max_len=128, datapath=str(tmp_path / "spec-fp8"), on_missing="raise")
        assert ds._get_raw_data(0)["hidden_states"].shape == (64, K * H)


def test_cli_export_on_fp8_dump(tmp_path):
    """The GPU round trip switches encodings with one env var: `python -m sglang_eagle3_ext.dump export` must work."""
    f8, _ = _dump(tmp_path / "fp8", "fp8")
    out = tmp_path / "sf"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_eagle3_ext.dump",
            "export",
            "--dump-dir",
            str(f8),
            "--to",
            "specforge",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["exported"] == 2
    rec = torch.load(out / "rows_0-2000" / "data_0.ckpt", weights_only=False)
    assert rec["aux_hidden_state"].dtype == torch.bfloat16 and rec["aux_hidden_state"].shape == (1, 64, K * H)
    assert json.loads((out / "sge3_dump_meta.json").read_text())["encoding"] == FP8_ROWWISE


def test_unknown_encoding_is_a_clear_error(tmp_path):
    from sglang_eagle3_ext.dump.sample_file import write_sample

    f8, _ = _dump(tmp_path / "fp8", "fp8")
    rec = read_manifest(f8)["s0"]
    raw, meta = read_sample(f8 / rec["file"], raw=True)
    write_sample(f8 / rec["file"], raw, {**meta, "encoding": "fp4_blockwise"})
    with pytest.raises(EncodingError, match="fp4_blockwise"):
        read_sample(f8 / rec["file"])
    with pytest.raises(ExportError, match="fp4_blockwise"):
        export_specforge(f8, tmp_path / "sf")
