"""Ctrl-C and SIGTERM during `sglang-eagle3 train` (the Llama route, speculators' trainer): one line, exit 130,
no traceback, and nothing of the run left beside --out (its working folder, a half-written output)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402

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


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_interrupts")
    target = ensure_tiny_target(root / "target", **SMALL)
    data = root / "data"
    (data / "hidden_states").mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for i in range(40):
        n = 48 + i % 17
        save_file(
            {
                "token_ids": torch.randint(0, SMALL["vocab_size"], (n,), generator=g),
                "hidden_states": torch.randn(n, 4, SMALL["hidden_size"], generator=g).to(torch.bfloat16),
            },
            str(data / "hidden_states" / f"hs_{i}.safetensors"),
        )
    (data / "metadata.json").write_text(json.dumps({"hf_hidden_state_indices": [1, 2, 3]}))
    return {"target": target, "data": data}


def _interrupt_while_training(world, runs, sig, workers: int) -> tuple[int, str]:
    runs.mkdir()
    argv = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext",
        "train",
        "--data",
        str(world["data"]),
        "--target",
        str(world["target"]),
        "--out",
        str(runs / "out"),
        "--device",
        "cpu",
        "--total-seq-len",
        "512",
        "--num-workers",
        str(workers),
        "--epochs",
        "20",
        "--log-every",
        "1",
        "--min-val-acc",
        "0",
    ]
    p = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        seen.append(line)
        if not line or " step 2/" in line:  # training, its loader workers running
            break
    p.send_signal(sig)
    rest = p.communicate(timeout=120)[0]
    return p.returncode, "".join(seen) + rest


@pytest.mark.parametrize("sig,workers", [(signal.SIGTERM, 1), (signal.SIGINT, 0)])
def test_an_interrupt_while_training_exits_130_with_one_line(world, tmp_path, sig, workers):
    rc, err = _interrupt_while_training(world, tmp_path / "runs", sig, workers)
    assert " step 2/" in err, err[-3000:]
    assert rc == 130, err[-3000:]
    assert err.count("interrupted") == 1 and "train: interrupted;" in err, err[-3000:]
    assert "Traceback" not in err and "error" not in err, err[-3000:]
    # no working folder, no temporary output: at most --out itself (an epoch done before the signal)
    assert {p.name for p in (tmp_path / "runs").iterdir()} <= {"out"}
