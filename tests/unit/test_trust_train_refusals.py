"""train refuses, before training, what would make its result a lie or its work unbounded (exit 2 naming the
flag or the file)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402

from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402

SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=32,
    q_lora_rank=32,
    qk_rope_head_dim=16,
    qk_nope_head_dim=16,
    v_head_dim=16,
    vocab_size=256,
    n_routed_experts=4,
    num_experts_per_tok=2,
    num_hidden_layers=4,
)


def write_samples(data, n: int, seed: int = 0):
    (data / "hidden_states").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        k = 48 + i % 17
        save_file(
            {
                "token_ids": torch.randint(0, SMALL["vocab_size"], (k,), generator=g),
                "hidden_states": torch.randn(k, 4, SMALL["hidden_size"], generator=g).to(torch.bfloat16),
            },
            str(data / "hidden_states" / f"hs_{i}.safetensors"),
        )
    (data / "metadata.json").write_text(json.dumps({"hf_hidden_state_indices": [1, 2, 3]}))
    return data


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return ensure_tiny_target(tmp_path_factory.mktemp("refusals") / "target", **SMALL)


def train(capsys, target, data, out, *extra) -> tuple[int, str]:
    rc = train_cli.main(
        [
            "--data",
            str(data),
            "--target",
            str(target),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--total-seq-len",
            "512",
            "--num-workers",
            "0",
            "--min-val-acc",
            "0",
            "--epochs",
            "1",
            *extra,
        ]
    )
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("samples,extra", [(1, ["--draft-arch", "mla"]), (1, []), (8, ["--train-ratio", "1"])])
def test_select_by_predicted_accept_with_nothing_held_out_is_refused(capsys, target, tmp_path, samples, extra):
    data = write_samples(tmp_path / "data", samples)
    rc, err = train(capsys, target, data, tmp_path / "out", "--select-by", "predicted-accept", *extra)
    assert rc == 2, err
    assert "--select-by predicted-accept" in err and "held out" in err, err
    assert ("--train-ratio 1" in err) if "--train-ratio" in extra else (str(data) in err), err
    assert not (tmp_path / "out").exists()
