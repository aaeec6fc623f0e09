"""What the training tests train on, imported as a plain module (`from train_world import ...`): the tiny target's
settings, its aux layers, random samples in speculators' offline layout, and train's arguments (its folders, the flags
of a one-step CPU run)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

# a DeepSeek-V3 target small enough to build and run in a test (tiny.deepseek_v3.ensure_tiny_target's overrides)
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
AUX = [1, 2, 3]  # the HF hidden_states indices the samples hold (the dump's default for 4 layers)

# train's flags for a draft trained in seconds on a CPU (the tutorial's CPU run): one step of a small draft with its
# own 512-token vocabulary
CPU_TRAIN = [
    "--device",
    "cpu",
    "--steps",
    "1",
    "--ttt-steps",
    "1",
    "--draft-vocab-size",
    "512",
    "--intermediate-size",
    "256",
    "--total-seq-len",
    "128",
    "--num-workers",
    "0",
    "--min-val-acc",
    "0",
]


def write_samples(
    data: Path,
    n: int,
    length: int | Callable[[int], int] = 24,
    seed: int = 0,
    *,
    seed_each: bool = False,
    aux: list[int] = AUX,
    metadata: bool = True,
    replace: dict[int, dict] | None = None,
) -> Path:
    """`n` samples data/hidden_states/hs_{i}.safetensors of random tokens of SMALL's vocab and bf16 hidden states
    [L, len(aux) + 1, hidden], L = `length` or `length(i)`, and data/metadata.json naming `aux` (unless
    `metadata=False`). One generator seeded `seed` draws every sample in turn, ids then states; with `seed_each`,
    sample i has its own, seeded seed + i. `replace={i: {name: tensor or None}}` swaps (None: drops) tensors of
    sample i after its draws, so the other samples stay as they are. Returns `data`."""
    import torch  # here: the modules that only read the settings above run without torch
    from safetensors.torch import save_file

    (data / "hidden_states").mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        if seed_each:
            g = torch.Generator().manual_seed(seed + i)
        L = length(i) if callable(length) else length
        t = {
            "token_ids": torch.randint(0, SMALL["vocab_size"], (L,), generator=g),
            "hidden_states": torch.randn(L, len(aux) + 1, SMALL["hidden_size"], generator=g).bfloat16(),
        }
        t.update((replace or {}).get(i, {}))
        save_file(
            {k: v.contiguous() for k, v in t.items() if v is not None},
            str(data / "hidden_states" / f"hs_{i}.safetensors"),
        )
    if metadata:
        (data / "metadata.json").write_text(json.dumps({"hf_hidden_state_indices": aux}))
    return data


def train_args(data, target, out) -> list[str]:
    """train's --data, --target and --out, as its command line takes them."""
    return ["--data", str(data), "--target", str(target), "--out", str(out)]


def cpu_run(log_every: int | None = None) -> list[str]:
    """train's flags of the CPU test runs: 512-token rows, no loader workers, no --min-val-acc bar (and --log-every
    N when given)."""
    flags = ["--device", "cpu", "--total-seq-len", "512", "--num-workers", "0"]
    return flags + (["--log-every", str(log_every)] if log_every else []) + ["--min-val-acc", "0"]


def train_on_cpu(data, target, out, *extra: str, log_every: int = 20) -> dict:
    """train_draft's result for train's command line: --data/--target/--out, the CPU run's flags, then `extra`."""
    from sglang_eagle3_ext.cli import train as train_cli
    from sglang_eagle3_ext.training import train_draft

    args = train_cli.build_parser().parse_args([*train_args(data, target, out), *cpu_run(log_every), *extra])
    return train_draft(train_cli.options_from_args(args))
