"""train_draft --draft-arch mla (training/mla/train.py) on hidden states of the real transformers DeepSeek-V3
(the world of test_train_draft.py), and both draft kinds trained against the tiny Kimi-K2.5 wrapper."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV3ForCausalLM"):
    pytest.skip("transformers has no DeepseekV3ForCausalLM", allow_module_level=True)

from safetensors.torch import load_file  # noqa: E402
from test_train_draft import world  # noqa: E402,F401 - the shared module fixture
from train_world import AUX, SMALL, train_args, train_on_cpu  # noqa: E402

from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError  # noqa: E402
from sglang_eagle3_ext.training.mla.train import load_checkpoint  # noqa: E402

SGLANG_LAYOUT = {
    "embed_tokens.weight",
    "fc.weight",
    "norm.weight",
    "lm_head.weight",
    "layers.0.self_attn.q_a_proj.weight",
    "layers.0.self_attn.q_a_layernorm.weight",
    "layers.0.self_attn.q_b_proj.weight",
    "layers.0.self_attn.kv_a_proj_with_mqa.weight",
    "layers.0.self_attn.kv_a_layernorm.weight",
    "layers.0.self_attn.kv_b_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.input_layernorm.weight",
    "layers.0.hidden_norm.weight",
    "layers.0.post_attention_layernorm.weight",
}


def _train(world, out, target=None, *extra):
    return train_on_cpu(world["data"], target or world["target"], out, *extra)


def test_train_mla_draft_learns_and_writes_sglangs_layout(world):
    out = world["root"] / "out_mla"
    r = _train(world, out, None, "--draft-arch", "mla", "--steps", "80", "--lr", "3e-3", "--ttt-steps", "2")
    assert r["steps"] == 80 and r["layer_ids"] == AUX
    assert r["final_loss"] < 0.7 * r["first_loss"], r
    assert r["train_acc"] > 0.15 and len(r["train_acc_by_step"]) == 2
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_config"]["hf_hidden_state_indices"] == AUX
    for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "hidden_size"):
        assert cfg[k] == SMALL[k], k
    saved = load_file(str(out / "model.safetensors"))
    assert set(saved) == SGLANG_LAYOUT
    assert all(v.dtype == torch.bfloat16 for v in saved.values())
    target = load_file(str(next(world["target"].glob("*.safetensors"))))
    assert torch.equal(saved["embed_tokens.weight"], target["model.embed_tokens.weight"])  # frozen
    m = load_checkpoint(out)
    assert torch.equal(m.state_dict()["fc.weight"], saved["fc.weight"])


def test_mla_refuses_files_that_do_not_match_the_layer_ids(world, tmp_path):
    with pytest.raises(TrainDraftError, match="expected"):
        _train(world, tmp_path / "o", None, "--draft-arch", "mla", "--steps", "2", "--layer-ids", "1,2")


@pytest.fixture(scope="module")
def kimi(world):
    from sglang_eagle3_ext.tiny.kimi_k25 import ensure_tiny_kimi_target

    return ensure_tiny_kimi_target(world["root"] / "kimi", **SMALL)  # same seed: the same language model


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_both_drafts_train_against_the_kimi_wrapper(world, kimi, arch, tmp_path):
    lm = load_file(str(kimi / "model.safetensors"))
    ds = load_file(str(next(world["target"].glob("*.safetensors"))))
    assert torch.equal(lm["language_model.lm_head.weight"], ds["lm_head.weight"])
    r = _train(world, tmp_path / arch, kimi, "--draft-arch", arch, "--steps", "4")
    assert r["steps"] == 4 and r["layer_ids"] == AUX
    cfg = json.loads((tmp_path / arch / "config.json").read_text())
    assert cfg.get("draft_vocab_size") == SMALL["vocab_size"] or cfg.get("vocab_size") == SMALL["vocab_size"]


def test_train_draft_fails_when_the_draft_did_not_learn(world, tmp_path, capsys):
    """Every accuracy is <= 1, the highest --min-val-acc: the run must end non-zero with the reason (both archs share
    training/report.require_learned; --min-val-acc 0 turns it off, as _train does)."""
    rc = train_cli.main(
        [
            *train_args(world["data"], world["target"], tmp_path / "o"),
            "--device",
            "cpu",
            "--draft-arch",
            "mla",
            "--steps",
            "2",
            "--min-val-acc",
            "1",
        ]
    )
    assert rc == 1  # a negative verdict, not bad input
    err = capsys.readouterr().err
    assert "did not learn" in err and "--min-val-acc" in err
    assert (tmp_path / "o" / "model.safetensors").exists()  # kept for inspection


@pytest.mark.parametrize("val, ok", [(0.0, False), (0.05, False), (0.06, True), (float("nan"), True), (None, True)])
def test_require_learned(val, ok, tmp_path):
    from sglang_eagle3_ext.training.report import require_learned

    if ok:
        require_learned(val, 0.05, tmp_path)
    else:
        with pytest.raises(TrainDraftError, match="did not learn"):
            require_learned(val, 0.05, tmp_path)
    require_learned(0.0, 0.0, tmp_path)  # 0 = off
