"""What the dump writes is what the user asked for, against real SGLang objects on CPU (the ForwardBatch, its
ForwardMode, MultimodalInputs, RMSNorm and LogitsProcessor, the real ServerArgs; the patch-table wrappers):
the sample rate in every writer, multimodal requests never written as token ids, start-up refusals where the
capture cannot work (two-batch overlap, HF index 0 where the release cannot capture it), and host copies that
read the batch's token ids as they were at capture time."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading

import pytest
import torch
from helpers import stub_deepseek_target
from test_dump_hook import _fb, _forward, _model

from sglang_eagle3_ext import envs, versions
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.manifest import read_manifest
from sglang_eagle3_ext.dump.sample_file import T_IDS, read_sample
from sglang_eagle3_ext.in_server.dump import copy as dump_copy
from sglang_eagle3_ext.in_server.dump import start
from sglang_eagle3_ext.server import runtime as sglang_runtime

pytestmark = pytest.mark.sglang
LAYERS = [1, 2, 5]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    start.reset()
    monkeypatch.setenv(envs.DUMP_MIN_TOKENS, "1")
    yield
    w = start.get_writer()
    if w is not None:
        w.close()


def _serve_env(monkeypatch, tmp_path, **extra):
    """The dump's variables as the server's process sees them (attach() reads the environment)."""
    env = {envs.DUMP_DIR: str(tmp_path), C.ENV_LAYERS: ",".join(map(str, LAYERS)), C.ENV_FINAL: "both", **extra}
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def _extend(rids, lens, ids=None):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    T = sum(lens)
    return _fb(ForwardMode.EXTEND, rids, [0] * len(rids), lens, lens, torch.arange(T) if ids is None else ids)


# ---- the sample rate is the dump's, in every writer -------------------------------------------------------


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_sample_rate_writes_exactly_the_sampled_requests(sglang_cpu, tmp_path, monkeypatch, writer):
    """One batch holding sampled and unsampled complete requests: only the sampled ones are written, by the
    thread writer and by the writer process's child alike."""
    _serve_env(monkeypatch, tmp_path, **{C.ENV_WRITER: writer, envs.DUMP_SAMPLE_RATE: "0.5"})
    m = _model(sglang_cpu)
    start.attach(m)
    w = start.get_writer()
    rids = [f"req-{i}" for i in range(16)]
    want = {r for r in rids if C.sampled(r, 0.5)}
    assert 0 < len(want) < len(rids)
    _forward(m, _extend(rids, [3] * len(rids), torch.arange(3 * len(rids)) % 7), False, LAYERS)
    assert w.flush(30)
    written = set(read_manifest(tmp_path))
    print(f"sample rate 0.5 ({writer} writer): {len(written)} of {len(rids)} written, {len(want)} selected")
    assert written == want


# ---- multimodal requests: their ids are pad values, never written ---------------------------------------


def _image_inputs(pad_value: int):
    from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem, MultimodalInputs

    return MultimodalInputs(mm_items=[MultimodalDataItem(modality=Modality.IMAGE, pad_value=pad_value)])


def _status(tmp_path) -> dict:
    return json.loads((tmp_path / "status" / "dp0.json").read_text())["stats"]


def _text_and_image(sglang_cpu, tmp_path, monkeypatch, writer, image_prompt_len):
    """A dumping model and one EXTEND batch: a 4-token text request beside an image request's first 5 tokens
    (pad values where the image goes, as SGLang puts them). (model, writer, batch, pad value)."""
    from sglang.srt.managers.schedule_batch import MM_PAD_SHIFT_VALUE
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    _serve_env(monkeypatch, tmp_path, **{C.ENV_WRITER: writer})
    m = _model(sglang_cpu)
    start.attach(m)
    pad = MM_PAD_SHIFT_VALUE + 12345
    ids = torch.tensor([1, 2, 3, 4] + [5, pad, pad, pad, 6])
    fb = _fb(ForwardMode.EXTEND, ["text", "image"], [0, 0], [4, 5], [4, image_prompt_len], ids)
    fb.mm_inputs = [None, _image_inputs(pad)]
    return m, start.get_writer(), fb, pad


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_multimodal_requests_are_counted_not_written(sglang_cpu, tmp_path, monkeypatch, writer):
    """An image request (SGLang put MM_PAD_SHIFT_VALUE + hash where the image goes) next to a text request in
    one batch, then the image request's second chunk: the text request is written, the image request only
    counted (in the status file `dump status` shows)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    m, w, fb, pad = _text_and_image(sglang_cpu, tmp_path, monkeypatch, writer, 8)
    _forward(m, fb, False, LAYERS)
    fb2 = _fb(ForwardMode.EXTEND, ["image"], [5], [3], [8], torch.tensor([pad, 7, 8]))
    fb2.mm_inputs = [_image_inputs(pad)]
    _forward(m, fb2, False, LAYERS)
    fb3 = _fb(ForwardMode.EXTEND, ["image2"], [0], [12], [12], torch.tensor([9] + [pad + 1] * 10 + [9]))
    fb3.mm_inputs = [_image_inputs(pad + 1)]  # a batch of image requests only: nothing to copy, counted
    _forward(m, fb3, False, LAYERS)
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"text"}
    t, _ = read_sample(tmp_path / read_manifest(tmp_path)["text"]["file"])
    assert t[T_IDS].tolist() == [1, 2, 3, 4]
    w.close()
    stats = _status(tmp_path)
    print(f"multimodal ({writer} writer): written {stats['written']}, skipped_multimodal {stats['skipped_multimodal']}")
    assert stats["skipped_multimodal"] == 2 and stats["written"] == 1 and stats["refused_token_id"] == 0


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_multimodal_requests_are_told_apart_after_the_embedding_step(sglang_cpu, tmp_path, monkeypatch, writer):
    """SGLang's multimodal embedding step (mm_utils.general_mm_embed_routine) clears ForwardBatch.mm_inputs and
    clamps the pad values in input_ids into the vocab, in place, before the logits processor runs, on a copy of
    the batch the eager runner made: at dump time the image request looks like text. The ids noted when the batch
    was built (the patch-table wrapper of ForwardBatch.init_new) still tell it apart."""
    import inspect

    from sglang.srt.managers import mm_utils
    from sglang.srt.model_executor.runner import eager_runner

    from sglang_eagle3_ext.in_server.hooks.forward_batch_info import record_multimodal

    src = inspect.getsource(mm_utils)
    assert "forward_batch.mm_inputs = None" in src and "input_ids.clamp_(" in src  # what this test replays
    assert "replace(" in inspect.getsource(eager_runner.EagerRunner.load_batch)
    m, w, built, _ = _text_and_image(sglang_cpu, tmp_path, monkeypatch, writer, 5)
    vocab = m.config.vocab_size
    built = record_multimodal(lambda: built, None, (), {})  # ForwardBatch.init_new, as patched
    fb = dataclasses.replace(built)  # the eager runner's copy (EagerRunner.load_batch)
    fb.mm_inputs = None  # the embedding step, as SGLang does it
    fb.input_ids.clamp_(min=0, max=vocab - 1)
    _forward(m, fb, False, LAYERS)
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"text"}
    w.close()
    assert _status(tmp_path)["skipped_multimodal"] == 1


def test_ids_outside_the_vocab_are_refused_even_without_mm_inputs(sglang_cpu, tmp_path, monkeypatch):
    """The writer's own check: a sample holding an id >= the target's vocab size is never a training sample."""
    _serve_env(monkeypatch, tmp_path)
    m = _model(sglang_cpu)
    vocab = m.config.vocab_size
    start.attach(m)
    w = start.get_writer()
    _forward(
        m, _extend(["ok", "bad", "neg"], [3, 3, 2], torch.tensor([1, 2, vocab - 1, 4, vocab, 5, 6, -1])), False, LAYERS
    )
    assert w.flush(30)
    assert set(read_manifest(tmp_path)) == {"ok"} and w.stats["refused_token_id"] == 2
    meta = json.loads((tmp_path / C.META_FILE).read_text())
    assert meta["vocab_size"] == vocab  # export checks ids against it too


# ---- start-up refusals ------------------------------------------------------------------------------------


def _tbo_args(sglang_cpu, model_dir, **kw):
    """Resolved server args with two-batch overlap on (set after resolution: 0.5.16 resolves it only with DP
    attention or an a2a backend, which a CPU process cannot build)."""
    sa = sglang_cpu.server_args(model_dir, **kw)
    object.__setattr__(sa, "enable_two_batch_overlap", True)
    return sa


def test_two_batch_overlap_refuses_the_dump_at_start_up(sglang_cpu, deepseek_dir, tmp_path, monkeypatch):
    from sglang_eagle3_ext.in_server.dump.capture import ATTR
    from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError

    sa = _tbo_args(sglang_cpu, deepseek_dir)
    monkeypatch.setattr(sglang_runtime, "server_args", lambda: sa)
    _serve_env(monkeypatch, tmp_path)
    m = _model(sglang_cpu)
    with pytest.raises(DumpStartupError, match="--enable-two-batch-overlap") as ei:
        start.install_from_init(m)
    assert "\n" not in str(ei.value)
    assert start.get_writer() is None and getattr(m.logits_processor, ATTR, None) is None


@contextlib.contextmanager
def _published(h, sa):
    h.publish(sa)
    try:
        yield sa
    finally:
        h.publish(h.server_args(sa.model_path))


def _eagle_draft(tmp_path, hf=None):
    """A draft config (no weights: ServerArgs and the capture-layer patch read only the config)."""
    from transformers import LlamaConfig

    d = tmp_path / "draft"
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=256,
    )
    cfg.architectures = ["LlamaForCausalLMEagle3"]
    cfg.save_pretrained(d)
    ec = {"eagle_aux_hidden_state_layer_ids": [2, 4, 6], "use_aux_hidden_state": True}
    if hf is not None:
        ec["hf_hidden_state_indices"] = hf
    c = json.loads((d / "config.json").read_text())
    c.update(eagle_config=ec, draft_vocab_size=128)
    (d / "config.json").write_text(json.dumps(c))
    return str(d)


@pytest.fixture
def draft_patches(sglang_cpu):
    import sglang_eagle3_ext

    sglang_eagle3_ext.apply(["draft"])
    yield sglang_cpu


def test_two_batch_overlap_refuses_an_eagle3_target_at_start_up(draft_patches, deepseek_dir, tmp_path):
    from sglang_eagle3_ext.draft.errors import DraftLoadError

    sa = _tbo_args(draft_patches, deepseek_dir, speculative_draft_model_path=_eagle_draft(tmp_path))
    t = stub_deepseek_target()
    with _published(draft_patches, sa), pytest.raises(DraftLoadError, match="--enable-two-batch-overlap"):
        t.set_eagle3_layers_to_capture([2, 4, 6])


def _no_layer0(monkeypatch):
    caps = dataclasses.replace(versions.capabilities(), version="0.5.10", CAPTURE_LAYER0=False)
    monkeypatch.setattr(versions, "capabilities", lambda: caps)


def test_index_0_refused_where_the_release_cannot_capture_it(sglang_cpu, tmp_path, monkeypatch):
    _no_layer0(monkeypatch)
    _serve_env(monkeypatch, tmp_path, **{C.ENV_LAYERS: "0,2,5"})
    m = _model(sglang_cpu)
    with pytest.raises(C.DumpConfigError, match=r"DUMP_LAYERS=0,2,5: HF index 0 .* 0\.5\.10.*>= 1"):
        start.attach(m)
    assert start.get_writer() is None
    monkeypatch.setenv(C.ENV_LAYERS, "1,2,5")  # indices >= 1 start
    assert start.attach(m) is not None


def test_index_0_of_a_draft_refused_where_the_release_cannot_capture_it(
    draft_patches, deepseek_dir, tmp_path, monkeypatch
):
    from sglang_eagle3_ext.draft.errors import LAYER_INDEX, DraftLoadError

    sa = draft_patches.server_args(deepseek_dir, speculative_draft_model_path=_eagle_draft(tmp_path, [0, 3, 5]))
    t = stub_deepseek_target()
    with _published(draft_patches, sa):
        t.set_eagle3_layers_to_capture([2, 4, 6])  # this release captures index 0
        assert t.model.layers_to_capture == [0, 3, 5]
        _no_layer0(monkeypatch)
        with pytest.raises(DraftLoadError, match="HF index 0") as ei:
            stub_deepseek_target().set_eagle3_layers_to_capture([2, 4, 6])
    assert ei.value.codes == [LAYER_INDEX]


# ---- the side-stream copy reads the ids as they were at capture ------------------------------------------


class _LateStream:
    """Stand-in for the side CUDA stream: the copies issued on it run only when the writer waits on the batch's
    event, and that wait holds until the compute stream has moved on (`moved_on`), as a busy GPU may."""

    def __init__(self):
        self.moved_on = threading.Event()
        self.event = self
        self.pending = []

    def __call__(self, host, dev):
        self.pending.append((host, dev))
        return host

    def synchronize(self):
        assert self.moved_on.wait(30)
        for host, dev in self.pending:
            host.copy_(dev)


def test_side_stream_copy_of_ids_survives_the_in_place_rewrite(sglang_cpu, tmp_path, monkeypatch):
    """SGLang 0.5.10's spec-v1 draft extend (EagleDraftInput.prepare_for_extend) shifts the batch's input_ids
    in place on the compute stream right after the target's forward; a side-stream copy of those ids must read
    a copy taken on the compute stream first."""
    late = _LateStream()

    @contextlib.contextmanager
    def copies(self, device, cuda):
        yield late

    monkeypatch.setattr(dump_copy.HostCopier, "copies", copies)
    monkeypatch.setattr(dump_copy.HostCopier, "uses_side_stream", lambda self, cuda: True)
    _serve_env(monkeypatch, tmp_path)
    m = _model(sglang_cpu)
    start.attach(m)
    w = start.get_writer()
    fb = _extend(["a", "b"], [4, 3], torch.tensor([10, 11, 12, 13, 20, 21, 22]))
    _forward(m, fb, False, LAYERS)
    pt, verified = 0, torch.tensor([14, 23])
    for i, n in enumerate(fb.extend_seq_lens_cpu):  # 0.5.10 eagle_info.py, prepare_for_extend
        ids = fb.input_ids[pt : pt + n]
        fb.input_ids[pt : pt + n] = torch.cat((ids[1:], verified[i].reshape(1)))
        pt += n
    late.moved_on.set()
    assert w.flush(30)
    man = read_manifest(tmp_path)
    assert read_sample(tmp_path / man["a"]["file"])[0][T_IDS].tolist() == [10, 11, 12, 13]
    assert read_sample(tmp_path / man["b"]["file"])[0][T_IDS].tolist() == [20, 21, 22]


def test_a_corrupt_manifest_stops_the_dumping_server_with_the_file_named(sglang_cpu, tmp_path, monkeypatch):
    """A manifest line of the wrong shape in the dump dir the user named: the server stops at start-up naming
    file:line (it would otherwise serve for hours with the dump disabled)."""
    from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError

    _serve_env(monkeypatch, tmp_path)
    (tmp_path / C.MANIFEST_DIR).mkdir()
    (tmp_path / C.MANIFEST_DIR / "dp0.jsonl").write_text('{"id": "a", "file": "samples/a.safetensors", "bytes": -5}\n')
    with pytest.raises(DumpStartupError, match=r"dp0\.jsonl:1.*bytes"):
        start.install_from_init(_model(sglang_cpu))
    assert start.get_writer() is None
