"""train_draft: speculators' own trainer on hidden states made by the real transformers DeepSeek-V3 (CPU).

The files follow speculators' offline layout: hidden_states [L, K+1, H] = HF hidden_states[k] for the aux
ids k, then the final state BEFORE model.norm. In transformers (5.x, `capture_outputs`), DeepseekV3's
`output_hidden_states[-1]` is tied to `last_hidden_state`, i.e. AFTER the final norm, so the pre-norm
state is taken from a forward pre-hook on `model.norm` (test_hf_last_hidden_state_is_post_norm pins this).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV3ForCausalLM"):
    pytest.skip("transformers has no DeepseekV3ForCausalLM", allow_module_level=True)

from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from train_world import AUX, SMALL, cpu_run, train_args, train_on_cpu  # noqa: E402

from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError  # noqa: E402
from sglang_eagle3_ext.training import data as training_data  # noqa: E402
from sglang_eagle3_ext.training.options import RUN_DIR  # noqa: E402
from sglang_eagle3_ext.training.speculators.draft_config import draft_layer_config  # noqa: E402

N_SAMPLES = 40


def _run_target(model, ids):
    pre = {}
    h = model.model.norm.register_forward_pre_hook(lambda mod, args: pre.__setitem__("x", args[0]))
    try:
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
    finally:
        h.remove()
    return out, pre["x"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_draft")
    target = ensure_tiny_target(root / "target", **SMALL)
    model = transformers.DeepseekV3ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    # random token sequences with a repeated motif, so the target's next-token argmax is partly predictable
    base = torch.randint(0, SMALL["vocab_size"], (N_SAMPLES, 64), generator=g)
    motif = torch.randint(0, SMALL["vocab_size"], (8,), generator=g)
    base[:, 16:48] = motif.repeat(4)
    out, prenorm = _run_target(model, base)
    data = root / "data"
    (data / "hidden_states").mkdir(parents=True)
    for i in range(N_SAMPLES):
        L = 48 + (i % 17)  # ragged lengths exercise speculators' packing
        hs = torch.stack([out.hidden_states[k][i, :L] for k in AUX] + [prenorm[i, :L]], 1)
        save_file(
            {"token_ids": base[i, :L].long().contiguous(), "hidden_states": hs.to(torch.bfloat16).contiguous()},
            str(data / "hidden_states" / f"hs_{i}.safetensors"),
        )
    (data / "metadata.json").write_text(json.dumps({"hf_hidden_state_indices": AUX}))
    return {"root": root, "target": target, "data": data, "model": model}


def _train(world, out, *extra):
    return train_on_cpu(world["data"], world["target"], out, *extra, log_every=10)


def _reload_matches(out):
    from speculators.models.eagle3 import Eagle3DraftModel

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        saved = {k: f.get_tensor(k) for k in f.keys()}
    model = Eagle3DraftModel.from_pretrained(str(out))
    sd = model.state_dict()
    for k, v in saved.items():
        assert k in sd, k
        assert torch.equal(sd[k].to(v.dtype).cpu(), v), k
    return saved, model


def test_hf_last_hidden_state_is_post_norm(world):
    model = world["model"]
    ids = torch.randint(0, SMALL["vocab_size"], (1, 12))
    out, pre = _run_target(model, ids)
    assert len(out.hidden_states) == SMALL["num_hidden_layers"] + 1
    torch.testing.assert_close(out.hidden_states[-1], model.model.norm(pre))
    assert not torch.allclose(out.hidden_states[-1], pre)


def test_train_full_vocab_and_reload(world):
    out = world["root"] / "out_full"
    r = _train(world, out, "--steps", "40")
    assert r["steps"] == 40 and r["layer_ids"] == AUX and r["n_samples"] == N_SAMPLES
    losses = [h["loss"] for h in r["history"]]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)
    accs = [h["full_acc_0"] for h in r["history"]]
    assert sum(accs[-5:]) / 5 > sum(accs[:5]) / 5

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3"
    assert cfg["eagle_aux_hidden_state_layer_ids"] == AUX
    assert cfg["draft_vocab_size"] == SMALL["vocab_size"]
    assert cfg["norm_before_residual"] is False and cfg["norm_before_fc"] is False
    tl = cfg["transformer_layer_config"]
    assert tl["model_type"] == "llama" and tl["num_hidden_layers"] == 1
    assert tl["hidden_size"] == SMALL["hidden_size"]
    assert tl["max_position_embeddings"] >= 4096
    assert tl["layer_types"] == ["full_attention"] and not tl.get("use_sliding_window")

    saved, model = _reload_matches(out)
    assert {"fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight"} <= set(saved)
    assert any(k.startswith("layers.0.self_attn.") for k in saved)
    assert "d2t" not in saved  # full vocab: speculators keeps no mapping
    assert "verifier_lm_head.weight" not in saved
    assert saved["fc.weight"].shape == (SMALL["hidden_size"], len(AUX) * SMALL["hidden_size"])
    # embeddings came from the target
    with safe_open(str(world["target"] / "model.safetensors"), framework="pt") as f:
        torch.testing.assert_close(
            saved["embed_tokens.weight"].float(), f.get_tensor("model.embed_tokens.weight").float()
        )
    assert not (out / RUN_DIR / "checkpoints").exists()


def test_train_draft_vocab_mapping(world):
    out = world["root"] / "out_dv"
    r = _train(world, out, "--steps", "8", "--draft-vocab-size", "128", "--layer-ids", "1,2,3")
    assert r["draft_vocab_size"] == 128
    saved, _ = _reload_matches(out)
    d2t, t2d = saved["d2t"], saved["t2d"]
    assert d2t.shape == (128,) and t2d.shape == (SMALL["vocab_size"],) and int(t2d.sum()) == 128
    chosen = (torch.arange(128) + d2t).tolist()
    assert chosen == sorted(chosen) and t2d[chosen].all()
    assert saved["lm_head.weight"].shape == (128, SMALL["hidden_size"])
    # the most frequent training token is in the draft vocab
    freq = torch.load(out / RUN_DIR / "data" / "token_freq.pt")
    assert max(freq, key=freq.get) in chosen
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 128


def test_layer_ids_must_match_the_files(world, tmp_path):
    with pytest.raises(TrainDraftError, match="slots"):
        _train(world, tmp_path / "o", "--steps", "1", "--layer-ids", "1,2")


def test_gap_in_hs_files_is_refused(tmp_path):
    d = tmp_path / "hs"
    d.mkdir()
    for i in (0, 2):
        (d / f"hs_{i}.safetensors").write_bytes(b"")
    with pytest.raises(TrainDraftError, match="contiguous"):
        training_data.list_hs_files(d)


def test_draft_layer_config_choices():
    c = draft_layer_config(
        {
            "hidden_size": 1024,
            "vocab_size": 4096,
            "num_attention_heads": 8,
            "intermediate_size": 2048,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
        }
    )
    assert (c["num_attention_heads"], c["head_dim"], c["num_key_value_heads"]) == (8, 128, 8)
    assert c["max_position_embeddings"] >= 8192 and c["intermediate_size"] == 2048
    c = draft_layer_config(
        {
            "hidden_size": 7168,
            "vocab_size": 129280,
            "num_attention_heads": 128,
            "intermediate_size": 18432,
            "max_position_embeddings": 163840,
            "rope_theta": 10000.0,
        }
    )
    assert c["head_dim"] == 128 and c["num_attention_heads"] == 56 and c["max_position_embeddings"] == 163840


def test_dump_export_layout_loss_mask_and_layer_ids(world, tmp_path):
    """The layout `python -m sglang_eagle3_ext.dump` exports: Arrow dataset + hidden_states/ + sge3_dump_meta.json."""
    import shutil

    import datasets

    d = tmp_path / "exp"
    shutil.copytree(world["data"] / "hidden_states", d / "hidden_states")
    (d / "sge3_dump_meta.json").write_text(json.dumps({"layer_indices_hf": AUX}))
    assert training_data.read_layer_ids_from_metadata(d) == (AUX, "sge3_dump_meta.json:layer_indices_hf")
    files = training_data.list_hs_files(training_data.find_hs_dir(d))
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    for p in files:
        with safe_open(str(p), framework="pt") as f:
            ids = f.get_tensor("token_ids").tolist()
        rows["input_ids"].append(ids)
        rows["loss_mask"].append([0] * 10 + [1] * (len(ids) - 10))
        rows["seq_len"].append(len(ids))
    datasets.Dataset.from_dict(rows).save_to_disk(str(d))
    info = training_data.prepare_data(d, files, tmp_path / "prep", len(AUX) + 1, SMALL["vocab_size"])
    assert info["loss_mask_from_dataset"] == N_SAMPLES
    assert info["n_loss_tokens"] == info["n_tokens"] - 10 * N_SAMPLES
    prep = datasets.load_from_disk(str(tmp_path / "prep"))
    assert prep[0]["loss_mask"].tolist()[:10] == [0] * 10


def test_trained_draft_converts_and_checks_clean(world, tmp_path):
    """train -> convert -> check on the real trainer's output (full vocab: no d2t; rope in rope_parameters)."""
    import subprocess
    import sys

    out = tmp_path / "draft"
    _train(world, out, "--steps", "5")
    conv = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.convert", str(out), str(tmp_path / "sglang")],
        capture_output=True,
        text=True,
    )
    assert conv.returncode == 0, conv.stdout + conv.stderr
    chk = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_eagle3_ext.check",
            str(tmp_path / "sglang"),
            "--target",
            str(world["target"]),
            "--scan-values",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert chk.returncode == 0, chk.stdout + chk.stderr
    cfg = json.loads((tmp_path / "sglang" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["hf_hidden_state_indices"] == AUX
    assert cfg["target_hidden_size"] == SMALL["hidden_size"]
    # SGLang's Llama layers read rope_parameters first, then rope_theta
    assert (cfg.get("rope_parameters") or {}).get("rope_theta") or cfg.get("rope_theta")


def test_a_report_that_cannot_be_written_is_refused_before_training(world, tmp_path, capsys):
    from sglang_eagle3_ext.cli import train as train_cli
    from sglang_eagle3_ext.cli.common import run_tool

    out = tmp_path / "draft"
    argv = [*train_args(world["data"], world["target"], out), *cpu_run(10), "--steps", "2", "--json", str(tmp_path)]
    assert run_tool("train", train_cli.main, argv) == 2
    assert "--json" in capsys.readouterr().err and not out.exists()  # nothing trained, nothing written
