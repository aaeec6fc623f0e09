"""Tiny MLA EAGLE-3 drafts (SGLang's `Eagle3DeepseekV2ForCausalLM`, the class of Kimi-K2.5's drafts),
for tests and GPU smoke runs (malformed variants: tests/malformed_drafts.py).

The files look like a published Kimi-K2.5 draft: `architectures: ["Eagle3DeepseekV2ForCausalLM"]`,
`model_type: deepseek_v3`, MLA dims, `eagle_config.eagle_aux_hidden_state_layer_ids`, weights under
`layers.0.*` with separate `q_a_proj` / `kv_a_proj_with_mqa` (SGLang fuses them at load). Random but
finite weights; d2t is a consistent hot-token mapping. `make_mla_draft_for_tiny_target` sizes one for
the built-in tiny DeepSeek-V3 target (tiny/deepseek_v3.py, hidden 1024, vocab 4096).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..draft.arch import mla
from .random_drafts import random_tensors, write_files


# Kimi-K2's rope_scaling type (SGLang's MLA runs it as deepseek_yarn; on CPU it needs one); factor 1: plain RoPE.
def _yarn(max_pos: int) -> dict:
    return {
        "type": "yarn",
        "factor": 1.0,
        "original_max_position_embeddings": max_pos,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }


def mla_config(
    *,
    hidden=64,
    vocab=128,
    draft_vocab=64,
    aux_ids=(1, 2, 3),
    heads=4,
    q_lora=32,
    kv_lora=16,
    rope=8,
    nope=16,
    v_head=16,
    intermediate=128,
    target_hidden=None,
    fc_norm=False,
    norm_output=False,
    max_position_embeddings=8192,
    dtype="bfloat16",
    **overrides,
) -> dict:
    cfg = {
        "architectures": [mla.ARCH],
        "model_type": "deepseek_v3",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": target_hidden or hidden,
        "q_lora_rank": q_lora,
        "kv_lora_rank": kv_lora,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "v_head_dim": v_head,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": _yarn(max_position_embeddings),
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_ids), "use_aux_hidden_state": True},
    }
    if fc_norm:
        cfg["fc_norm"] = True
    if norm_output:
        cfg["norm_output"] = True
    cfg.update(overrides)
    return cfg


def mla_tensors(cfg: dict, seed: int = 0) -> dict:
    """Checkpoint tensors (published layout) for `cfg`, shapes from the same rules the loader checks."""
    import torch

    skip = ("t2d", "d2t", "embed_tokens.weight")
    out, spec, g = random_tensors(cfg, mla.REQUIRES, seed, skip=skip, fc_norm=True, norm_output=True)
    if spec.draft_vocab is not None:
        hot = torch.sort(torch.randperm(spec.vocab, generator=g)[: spec.draft_vocab]).values
        out["d2t"] = hot - torch.arange(spec.draft_vocab)
        t2d = torch.zeros(spec.vocab, dtype=torch.bool)
        t2d[hot] = True
        out["t2d"] = t2d
    return out


def make_mla_draft(out, seed: int = 0, **config) -> Path:
    """A well-formed MLA EAGLE-3 draft in SGLang's published layout (EAGLE-3.1: fc_norm=True, norm_output=True)."""
    cfg = mla_config(**config)
    return write_files(out, cfg, mla_tensors(cfg, seed), "tiny mla draft")


def make_mla_draft_for_tiny_target(out, target_dir, aux_ids=(1, 2, 3), **overrides) -> Path:
    """An MLA draft for the built-in tiny DeepSeek-V3 target (its hidden, vocab and MLA dims)."""
    t = json.loads((Path(target_dir) / "config.json").read_text())
    kw = dict(
        hidden=t["hidden_size"],
        vocab=t["vocab_size"],
        draft_vocab=1024,
        aux_ids=aux_ids,
        heads=t["num_attention_heads"],
        q_lora=t["q_lora_rank"],
        kv_lora=t["kv_lora_rank"],
        rope=t["qk_rope_head_dim"],
        nope=t["qk_nope_head_dim"],
        v_head=t["v_head_dim"],
        intermediate=t["intermediate_size"],
        max_position_embeddings=t["max_position_embeddings"],
    )
    kw.update(overrides)
    return make_mla_draft(out, **kw)
