"""The tiny Kimi-K2.5 target (tiny_kimi.py) read by the real SGLang on CPU: its config class, the processor
SGLang builds for the architecture, KimiK25ForConditionalGeneration built from the config and loading every
checkpoint tensor by SGLang's own load_weights; then our capture and dump patches reaching the language
model inside the wrapper (the EAGLE-3 / dump target)."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
from mla_cpu import init_dp_attention

pytestmark = pytest.mark.sglang
# small enough for a 2-core CPU; same structure as the served tiny (MLA, MoE from layer 1)
SMALL = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    moe_intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    kv_lora_rank=64,
    q_lora_rank=96,
    qk_rope_head_dim=32,
    qk_nope_head_dim=32,
    v_head_dim=32,
)
# SGLang's CPU RoPE factory only builds YaRN; factor 1 is plain RoPE (same tables, mscale 1)
CPU_ROPE = {
    "rope_type": "deepseek_yarn",
    "type": "yarn",
    "factor": 1.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory):
    from sglang_eagle3_ext.tiny.kimi_k25 import ensure_tiny_kimi_target

    return ensure_tiny_kimi_target(tmp_path_factory.mktemp("kimi") / "tiny-kimi", **SMALL)


@pytest.fixture(scope="module")
def cpu_dir(kimi_dir, tmp_path_factory):
    """The same checkpoint with the CPU-buildable RoPE (the weights are linked, not copied)."""
    d = tmp_path_factory.mktemp("kimi_cpu")
    cfg = json.loads((kimi_dir / "config.json").read_text())
    cfg["text_config"]["rope_scaling"] = CPU_ROPE
    (d / "config.json").write_text(json.dumps(cfg))
    for f in kimi_dir.iterdir():
        if f.is_file() and f.name != "config.json":
            (d / f.name).symlink_to(f)
    return d


@contextlib.contextmanager
def _served(h, path, **kw):
    from sglang.srt.configs.model_config import ModelConfig

    sa = h.server_args(str(path), trust_remote_code=True, **kw)
    h.publish(sa)
    mc = ModelConfig.from_server_args(sa)
    init_dp_attention(sa, mc)
    yield sa, mc


def _build(h, path, **kw):
    from sglang.srt.models.registry import ModelRegistry

    with _served(h, path, **kw) as (sa, mc):
        cls = ModelRegistry.resolve_model_cls(mc.hf_config.architectures)[0]
        return cls(mc.hf_config), mc


def test_sglang_reads_the_config_and_builds_its_processor(sglang_cpu, kimi_dir):
    try:
        from sglang.srt.utils.hf_transformers.processor import get_processor
    except ImportError:  # <= 0.5.10
        from sglang.srt.utils.hf_transformers_utils import get_processor

    with _served(sglang_cpu, kimi_dir) as (sa, mc):
        assert type(mc.hf_config).__name__ == "KimiK25Config" and mc.hf_config.model_type == "kimi_k25"
        assert mc.hf_config.architectures == ["KimiK25ForConditionalGeneration"]
        assert mc.hf_text_config.num_hidden_layers == SMALL["num_hidden_layers"]
        assert mc.is_multimodal  # so SGLang builds a processor even without a tokenizer
        proc = get_processor(sa.tokenizer_path or sa.model_path, trust_remote_code=True, model_name=sa.model_path)
        from sglang.srt.managers.multimodal_processor import get_mm_processor, import_processors

        import_processors("sglang.srt.multimodal.processors")
        mm = get_mm_processor(mc.hf_config, sa, proc, "default", model_config=mc)
        assert type(mm).__module__.endswith("processors.kimi_k25")


def test_sglang_builds_the_wrapper_and_loads_every_tensor(sglang_cpu, kimi_dir, cpu_dir):
    from safetensors.torch import load_file

    model, _ = _build(sglang_cpu, cpu_dir)
    assert type(model).__name__ == "KimiK25ForConditionalGeneration"
    assert type(model.language_model).__name__ == "DeepseekV3ForCausalLM"
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    ckpt = load_file(str(kimi_dir / "model.safetensors"))
    assert any(k.startswith("vision_tower.") for k in ckpt) and any(
        k.startswith("language_model.model.layers.") for k in ckpt
    )
    model.load_weights(iter(ckpt.items()))  # an unknown vision name raises; language names are mapped
    unloaded = [n for n, p in model.named_parameters() if torch.isnan(p).any()]
    assert not unloaded, f"parameters SGLang's load_weights never filled: {unloaded[:8]}"
    lm = model.language_model
    assert torch.equal(
        lm.model.embed_tokens.weight.to(torch.bfloat16), ckpt["language_model.model.embed_tokens.weight"]
    )
    text = load_file(str(next((kimi_dir / "text").glob("*.safetensors"))))  # the reference: same weights
    assert torch.equal(text["lm_head.weight"], ckpt["language_model.lm_head.weight"])


def _draft_dir(tmp_path, target, hf):
    """An MLA draft config as train_draft writes it (ids for the release: [1, 2, 3] as given)."""
    from sglang_eagle3_ext.training.mla.train import mla_draft_config
    from sglang_eagle3_ext.training.target_view import text_config

    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(mla_draft_config(text_config(target), hf)))
    return d


def test_capture_layers_reach_the_language_model_through_the_wrapper(sglang_cpu, cpu_dir, tmp_path):
    """SGLang calls set_eagle3_layers_to_capture on the wrapper; it delegates to language_model (a
    DeepseekV3ForCausalLM), whose inherited DeepseekV2 method our table patches: HF indices exactly."""
    import sglang_eagle3_ext

    sglang_eagle3_ext.apply(["draft"])
    model, _ = _build(sglang_cpu, cpu_dir)
    hf = [1, 2, 3]  # ids starting with 1: 0.5.14+ alone would capture [2, 3, 4]
    with _served(
        sglang_cpu,
        cpu_dir,
        speculative_draft_model_path=str(_draft_dir(tmp_path, cpu_dir, hf)),
        speculative_algorithm="EAGLE3",
    ):
        model.set_eagle3_layers_to_capture([1, 2, 3])
    assert model.language_model.model.layers_to_capture == hf
    assert model.language_model.capture_aux_hidden_states is True


def test_dump_attaches_to_the_language_model_inside_the_wrapper(sglang_cpu, cpu_dir, tmp_path, monkeypatch):
    import sglang_eagle3_ext
    from sglang_eagle3_ext.in_server.dump import capture, start

    start.reset()
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_LAYERS", "1,2,3")
    sglang_eagle3_ext.apply(["dump"])
    try:
        model, _ = _build(sglang_cpu, cpu_dir, disable_radix_cache=True)
    finally:
        sglang_eagle3_ext.revert()
        sglang_eagle3_ext.apply(["draft"])
    lm = model.language_model
    assert lm.model.layers_to_capture == [1, 2, 3] and lm.capture_aux_hidden_states
    target = lm.logits_processor.__dict__.get(capture.ATTR)
    assert target is not None and target.layers == [1, 2, 3]
    w = start.get_writer()
    assert w is not None
    w.close()
