"""The capture hook against real SGLang objects on CPU: a real ForwardBatch with the real ForwardMode
enum, SGLang's RMSNorm and LogitsProcessor, the patch-table wrappers applied through wrapt."""

from __future__ import annotations

import types

import pytest
import torch
from helpers import _short_samples_allowed  # noqa: F401 (autouse fixture)

from sglang_eagle3_ext import envs, versions
from sglang_eagle3_ext.draft.layers import default_layers
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.export import rms_norm
from sglang_eagle3_ext.dump.manifest import read_manifest
from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, read_sample
from sglang_eagle3_ext.in_server.dump import start
from sglang_eagle3_ext.in_server.hooks.logits_processor import dump_prefill

# HF index 0 (the embeddings) where the installed release can capture it, else the first layer's output
HOOK_LAYERS = [0, 2, 5] if versions.capabilities().CAPTURE_LAYER0 else [1, 2, 5]
HOOK_LAYERS_ENV = ",".join(map(str, HOOK_LAYERS))


def _original_forward(lp, seen: list | None = None):
    """LogitsProcessor.forward bound to `lp` with its real signature (the wrapper binds the call's arguments
    by name), the logits computation replaced by a stand-in that records the call."""
    import functools

    @functools.wraps(type(lp).forward)
    def forward(self, *a, **k):
        if seen is not None:
            seen.append(a)
        return "logits"

    return types.MethodType(forward, lp)


pytestmark = pytest.mark.sglang
H, N = 16, 6


def _model(sglang_cpu):
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.logits_processor import LogitsProcessor
    from transformers import PretrainedConfig

    cfg = PretrainedConfig(hidden_size=H, num_hidden_layers=N, vocab_size=256, architectures=["DeepseekV3ForCausalLM"])

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm(H, eps=1e-6)
            self.norm.weight.data = torch.rand(H) + 0.5
            self.layers_to_capture = []

    # Named like the target class: attach() only accepts the real targets' class names.
    DeepseekV3ForCausalLM = type("DeepseekV3ForCausalLM", (torch.nn.Module,), {})
    m = DeepseekV3ForCausalLM()
    m.config, m.model = cfg, Inner()
    m.capture_aux_hidden_states = False
    m.logits_processor = LogitsProcessor(cfg)
    return m


def _fb(mode, rids, prefix, ext, orig, ids):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    bs = len(rids)
    return ForwardBatch(
        forward_mode=mode,
        batch_size=bs,
        input_ids=ids,
        req_pool_indices=torch.arange(bs),
        seq_lens=torch.tensor([p + e for p, e in zip(prefix, ext)]),
        out_cache_loc=torch.arange(len(ids)),
        seq_lens_sum=sum(p + e for p, e in zip(prefix, ext)),
        orig_seq_lens=torch.tensor(orig, dtype=torch.int32),
        rids=list(rids),
        extend_prefix_lens_cpu=list(prefix),
        extend_seq_lens_cpu=list(ext),
    )


def _forward(m, fb, packed, layers, nan_row=None, pad=0):
    """What DeepseekV2ForCausalLM.forward hands LogitsProcessor.forward: run the real norm (its hook
    stashes the pre-norm state), then call our wrapper with a stand-in for the logits computation.
    nan_row: put a NaN into that row of the second aux layer; pad: extra rows past the batch's tokens."""
    T = fb.input_ids.shape[0] + pad
    residual = torch.randn(T, H)
    x = torch.randn(T, H)
    prenorm = x + residual
    post, _ = m.model.norm(x.clone(), residual.clone())
    aux = [torch.randn(T, H) for _ in layers]
    if nan_row is not None:
        aux[1][nan_row, 3] = float("nan")
    aux_arg = torch.cat(aux, -1) if packed else aux
    seen = []
    dump_prefill(
        _original_forward(m.logits_processor, seen), m.logits_processor, (None, post, None, fb, aux_arg), {}
    )  # Kimi-K2.5 passes input_ids=None
    assert seen, "the original forward must always run"
    return prenorm, post, torch.cat(aux, -1)


def _p1_stitched(w, tmp_path, r1, r2):
    """After both forwards: p1 (4 rows of the first, 2 of the second) and p2 are listed, p1 stitched right."""
    assert w.flush(30)
    man = read_manifest(tmp_path)
    assert set(man) == {"p1", "p2"}
    t, meta = read_sample(tmp_path / man["p1"]["file"])
    assert t[T_IDS].tolist() == [0, 1, 2, 3, 100, 101]
    assert torch.equal(t[T_AUX], torch.cat([r1[2][:4], r2[2][:2]]))
    assert torch.equal(t[T_PRE], torch.cat([r1[0][:4], r2[0][:2]]))
    assert torch.equal(t[T_POST], torch.cat([r1[1][:4], r2[1][:2]]))
    return man, t, meta


@pytest.mark.parametrize("staging", [None, 1 << 16, 1024])  # no ring (CPU default), roomy ring, ring too small
@pytest.mark.parametrize("packed", [False, True])
def test_hook_dumps_pure_extend_and_stitches_chunks(sglang_cpu, tmp_path, monkeypatch, packed, staging):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_eagle3_ext.in_server.dump.staging import PinnedRing

    start.reset()
    cfg = C.from_env(
        {envs.DUMP_DIR: str(tmp_path), C.ENV_LAYERS: HOOK_LAYERS_ENV, C.ENV_FINAL: "both", C.ENV_MIN_TOKENS: "1"}
    )
    m = _model(sglang_cpu)
    target = start.attach(m, cfg)
    assert target.copier.ring is None  # CPU model: no pinned staging buffer
    ring = target.copier.ring = PinnedRing(staging, pin=False) if staging else None
    assert m.capture_aux_hidden_states and m.model.layers_to_capture == HOOK_LAYERS  # HF indices, no +1
    w = start.get_writer()
    # chunk 1: "p1" tokens 0..3 of 6, plus a nodump- request; chunk 2: p1 tokens 4..5 and p2 (3 tokens)
    fb1 = _fb(ForwardMode.EXTEND, ["p1", "nodump-g"], [0, 0], [4, 2], [6, 2], torch.arange(6))
    r1 = _forward(m, fb1, packed, HOOK_LAYERS)
    fb2 = _fb(ForwardMode.EXTEND, ["p1", "p2"], [4, 0], [2, 3], [6, 3], torch.arange(100, 105))
    r2 = _forward(m, fb2, packed, HOOK_LAYERS)
    # not pure EXTEND: never dumped, even with dumpable rids
    for mode in (ForwardMode.MIXED, ForwardMode.TARGET_VERIFY, ForwardMode.DECODE, ForwardMode.DRAFT_EXTEND_V2):
        _forward(m, _fb(mode, ["p3"], [0], [2], [2], torch.arange(2)), packed, HOOK_LAYERS)
    man, t, meta = _p1_stitched(w, tmp_path, r1, r2)
    # SGLang's own RMSNorm output = our re-derivation from the pre-norm state (used by the SpecForge export)
    assert torch.allclose(rms_norm(t[T_PRE], m.model.norm.weight.data, 1e-6), t[T_POST], atol=1e-5)
    assert meta["layer_indices_hf"] == HOOK_LAYERS and meta["hidden_size"] == H and meta["sglang_version"]
    assert meta["tp_size"] == 1 and meta["dp_size"] == 1
    if ring is not None:  # every region went back once its samples were written (or not dumped)
        assert not ring._live and ring.allocated + ring.fallbacks == 2  # the two EXTEND batches
        assert ring.fallbacks == (2 if staging == 1024 else 0)
    w.close()


@pytest.mark.parametrize("packed", [False, True])
def test_hook_feeds_the_writer_process(sglang_cpu, tmp_path, monkeypatch, packed):
    """SGLANG_EAGLE3_EXT_DUMP_WRITER=process: the capture copies into the memory it shares with the child,
    which stitches and writes the same files."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    start.reset()
    cfg = C.from_env(
        {
            envs.DUMP_DIR: str(tmp_path),
            C.ENV_LAYERS: HOOK_LAYERS_ENV,
            C.ENV_FINAL: "both",
            C.ENV_MIN_TOKENS: "1",
            C.ENV_WRITER: "process",
        }
    )
    m = _model(sglang_cpu)
    target = start.attach(m, cfg)
    w = start.get_writer()
    assert target.copier.ring is not None and target.copier.ring is w.staging  # shared memory, also on CPU
    r1 = _forward(
        m, _fb(ForwardMode.EXTEND, ["p1", "p2"], [0, 0], [4, 3], [6, 3], torch.arange(7)), packed, HOOK_LAYERS
    )
    r2 = _forward(m, _fb(ForwardMode.EXTEND, ["p1"], [4], [2], [6], torch.arange(100, 102)), packed, HOOK_LAYERS)
    man, t, meta = _p1_stitched(w, tmp_path, r1, r2)
    assert meta["layer_indices_hf"] == HOOK_LAYERS and meta["sglang_version"]
    t2, _ = read_sample(tmp_path / man["p2"]["file"])
    assert torch.equal(t2[T_AUX], r1[2][4:7])
    from safetensors.torch import load_file

    norm = load_file(str(tmp_path / "final_norm.safetensors"))["weight"]  # the norm weight crossed over too
    assert torch.equal(norm, m.model.norm.weight.data)
    w.close()
    assert not target.copier.ring._live and w.budget.used == 0


def test_hook_refuses_prefix_cache_hit_and_changed_layers(sglang_cpu, tmp_path, monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    start.reset()
    m = _model(sglang_cpu)
    start.attach(m, C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_MIN_TOKENS: "1"}))
    assert m.model.layers_to_capture == default_layers(N) == [1, 3, 5]
    w = start.get_writer()
    _forward(m, _fb(ForwardMode.EXTEND, ["hit"], [3], [2], [5], torch.arange(2)), False, default_layers(N))
    assert w.flush(30) and w.stats["refused_prefix_cache"] == 1
    m.model.layers_to_capture = [3, 4, 5]  # e.g. speculative decoding re-set the layers
    _forward(m, _fb(ForwardMode.EXTEND, ["x"], [0], [2], [2], torch.arange(2)), False, [3, 4, 5])
    assert w.flush(30) and read_manifest(tmp_path) == {}
    w.close()


def test_bad_config_stops_start_up_with_the_fix(sglang_cpu, tmp_path, monkeypatch):
    from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError

    start.reset()
    monkeypatch.setenv(envs.DUMP_DIR, str(tmp_path))
    monkeypatch.setenv(C.ENV_LAYERS, "1,99")
    m = _model(sglang_cpu)
    with pytest.raises(DumpStartupError, match="out of range"):
        start.install_from_init(m)  # the server refuses to start, naming the variable
    assert start.get_writer() is None
    monkeypatch.setenv(C.ENV_LAYERS, "1,2,3")
    monkeypatch.setenv(envs.DUMP_DIR, str(tmp_path / "missing"))
    with pytest.raises(DumpStartupError, match="does not exist"):
        start.install_from_init(m)
    assert start.get_writer() is None


@pytest.mark.parametrize("packed", [False, True])
def test_nan_rows_skip_only_their_request(sglang_cpu, tmp_path, monkeypatch, packed):
    """A NaN in one request's rows drops that request, counted; the other request of the same batch is
    written; padded rows past the tokens do not count. (CPU model: the io thread checks; on CUDA the
    capture's per-row flags do, see test_dump_staging.)"""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    start.reset()
    cfg = C.from_env(
        {envs.DUMP_DIR: str(tmp_path), C.ENV_LAYERS: HOOK_LAYERS_ENV, C.ENV_FINAL: "both", C.ENV_MIN_TOKENS: "1"}
    )
    m = _model(sglang_cpu)
    start.attach(m, cfg)
    w = start.get_writer()
    fb = _fb(ForwardMode.EXTEND, ["good", "bad"], [0, 0], [3, 4], [3, 4], torch.arange(7))
    fb.input_ids = torch.arange(7)
    _forward(m, fb, packed, HOOK_LAYERS, nan_row=5, pad=2)
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"good"} and w.stats["nonfinite"] == 1
    w.close()


def test_request_aborted_mid_chunked_prefill_frees_the_ring(sglang_cpu, tmp_path, monkeypatch):
    """A request aborted after its first chunk (client disconnect, /abort_request) is never
    continued; once the next batches no longer carry it, its staging-ring region and budget come back,
    so later batches keep fitting the ring (the old code pinned the ring's tail for ever)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_eagle3_ext.in_server.dump.assemble import STALE_BATCHES
    from sglang_eagle3_ext.in_server.dump.staging import PinnedRing

    start.reset()
    cfg = C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_LAYERS: HOOK_LAYERS_ENV, C.ENV_MIN_TOKENS: "1"})
    m = _model(sglang_cpu)
    target = start.attach(m, cfg)
    ring = target.copier.ring = PinnedRing(1 << 16, pin=False)
    w = start.get_writer()
    _forward(m, _fb(ForwardMode.EXTEND, ["dead", "a"], [0, 0], [4, 3], [64, 3], torch.arange(7)), False, HOOK_LAYERS)
    for i in range(STALE_BATCHES + 3):
        _forward(m, _fb(ForwardMode.EXTEND, [f"n{i}"], [0], [5], [5], torch.arange(5)), False, HOOK_LAYERS)
    assert w.flush(30)
    assert w.budget.used == 0 and not ring._live and ring.fallbacks == 0
    assert set(read_manifest(tmp_path)) == {"a"} | {f"n{i}" for i in range(STALE_BATCHES + 3)}
    assert w.stats["ended_unfinished"] == 1
    w.close()
