"""The layer rules of draft/layers.py against the installed SGLang's own set_eagle3_layers_to_capture, and the
start-up context: SGLang's real ServerArgs read once per process into one StartupContext that the dump's
start-up, the capture-layer patch and the draft loader all take."""

from __future__ import annotations

import json

import pytest
from helpers import serving, stub_deepseek_target
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dump_hook import _model

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.draft import layers as L
from sglang_eagle3_ext.in_server.dump import start
from sglang_eagle3_ext.server import runtime

pytestmark = pytest.mark.sglang


def _release_method():
    """SGLang's own set_eagle3_layers_to_capture (unwrapped where the draft patches are on)."""
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    fn = DeepseekV2ForCausalLM.__dict__["set_eagle3_layers_to_capture"]
    return getattr(fn, "__wrapped__", fn)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(4, 80), ids=st.none() | st.lists(st.integers(0, 60), min_size=1, max_size=4, unique=True))
def test_rules_are_what_the_release_captures(sglang_cpu, n, ids):
    from sglang_eagle3_ext.versions import capabilities

    t = stub_deepseek_target(n)
    _release_method()(t, ids)
    if ids is None:
        assert t.model.layers_to_capture == L.sglang_default_layers(n)
        if L.sglang_default_layers(n) == sorted(set(L.sglang_default_layers(n))):
            assert L.default_layers(n) == t.model.layers_to_capture  # the dump's default = SGLang's
    else:
        assert t.model.layers_to_capture == L.release_capture(ids, capabilities().CAPTURE_ALWAYS_PLUS_ONE)


def _draft(tmp_path, hf):
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
    c = json.loads((d / "config.json").read_text())
    c.update(eagle_config={L.AUX_IDS_FIELD: [0, 1, 2], L.HF_INDICES_FIELD: hf}, draft_vocab_size=128)
    (d / "config.json").write_text(json.dumps(c))
    return d


def test_one_context_per_process_for_every_consumer(ext, deepseek_dir, tmp_path, monkeypatch):
    """The dump's start-up, the capture-layer patch and the draft loader under one published ServerArgs: the
    context is built once and the draft's config read once."""
    from transformers import LlamaConfig

    from sglang_eagle3_ext.draft.keys import installed_layout
    from sglang_eagle3_ext.in_server.draft import loader
    from sglang_eagle3_ext.server import startup

    draft = _draft(tmp_path, [1, 2, 3])
    reads, builds = [], []
    real_read, real_build = runtime.read_config, startup.StartupContext.from_server_args.__func__
    monkeypatch.setattr(runtime, "read_config", lambda p: reads.append(str(p)) or real_read(p))
    monkeypatch.setattr(
        startup.StartupContext,
        "from_server_args",
        classmethod(lambda cls, sa: builds.append(sa) or real_build(cls, sa)),
    )
    start.reset()
    monkeypatch.setenv(envs.DUMP_DIR, str(tmp_path / "dump"))
    (tmp_path / "dump").mkdir()
    with serving(ext, deepseek_dir, draft) as sa:
        assert start.attach(_model(ext)) is not None  # the dump
        t = stub_deepseek_target(4)
        t.set_eagle3_layers_to_capture([0, 1, 2])  # the capture-layer patch
        assert t.model.layers_to_capture == [1, 2, 3]
        model = type("Draft", (), {"config": LlamaConfig.from_pretrained(draft)})()
        loader.pre_load_problems(model, installed_layout())  # the loader
        ctx = startup.startup_context()
    w = start.get_writer()
    if w is not None:
        w.close()
    assert builds == [sa] and ctx.server_args is sa and L.recorded_hf_indices(ctx.draft_config) == [1, 2, 3]
    assert reads.count(str(draft)) == 1 and reads.count(str(deepseek_dir)) == 1
    assert ctx.draft_dir == draft and ctx.target_config["num_hidden_layers"] == 4


def test_a_process_without_server_args_does_not_pin_an_empty_context(monkeypatch):
    from sglang_eagle3_ext.server import startup

    monkeypatch.setattr(runtime, "server_args", lambda: None)
    first = startup.startup_context()
    assert first.server_args is None and first.draft_path is None and startup.startup_context() is not first
