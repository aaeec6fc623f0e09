"""Tiny EAGLE-3 drafts made with the speculators library itself (tests, GPU smoke runs, benchmarks).

Requires `speculators` (the package's `test` extra). Weights are random but finite, d2t/t2d are a
consistent hot-token mapping; the result is exactly what `save_pretrained` of a trained
speculators Eagle3 draft looks like.
"""

from __future__ import annotations

from pathlib import Path

from ..outdir import writing
from .random_drafts import save_random, speculators_config


def make_speculators_draft(
    out,
    *,
    hidden: int = 64,
    vocab: int = 128,
    draft_vocab: int = 64,
    aux_ids=(1, 2, 3),
    n_layers: int = 1,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    target_hidden: int | None = None,
    seed: int = 0,
    max_position_embeddings: int = 8192,
    dtype=None,
    **config_overrides,
) -> Path:
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from transformers import LlamaConfig

    torch.manual_seed(seed)
    tl = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        head_dim=hidden // heads,
        max_position_embeddings=max_position_embeddings,
    )
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tl,
        draft_vocab_size=draft_vocab,
        target_hidden_size=target_hidden,
        eagle_aux_hidden_state_layer_ids=list(aux_ids),
        speculators_config=speculators_config("eagle3", 3),
        **config_overrides,
    )
    return save_random(Eagle3DraftModel(cfg), out, vocab, "tiny speculators draft", dtype)


def sglang_weights_iterator(draft_dir):
    """(name, tensor) pairs read by SGLang's own iterators, as its model loader does."""
    from sglang.srt.model_loader import weight_utils as wu

    d = Path(draft_dir)
    st = sorted(str(p) for p in d.glob("*.safetensors"))
    if st:
        return wu.safetensors_weights_iterator(st)
    return wu.pt_weights_iterator(sorted(str(p) for p in d.glob("*.bin")))


# --- malformed variants of a good converted draft: name -> (expected code, builder) ------------------


def write_target_config(out, *, hidden: int = 64, vocab: int = 128, layers: int = 8, **overrides) -> Path:
    """A target-model config.json only (enough for the draft/target consistency rules)."""
    import json

    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": vocab,
        "max_position_embeddings": 8192,
        **overrides,
    }
    with writing(out, tool="tiny target config", flag="out", replace=True) as tmp:  # never a real target's
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    return Path(out)
