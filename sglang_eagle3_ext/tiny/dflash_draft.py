"""Tiny DFlash drafts (SGLang's `DFlashDraftModel`), for tests and GPU smoke runs.

Two kinds: one in SGLang's layout, as z-lab publishes theirs (`architectures: ["DFlashDraftModel"]`, Qwen3 fields,
`dflash_config.{block_size, target_layer_ids, mask_token_id}`, weights `layers.*`, `fc`, `hidden_norm`, `norm`),
with shapes from the same rules the loader checks; and one written by speculators' own DFlashDraftModel
(`save_pretrained`), which `convert` turns into the first. Random but finite weights.
`make_dflash_draft_for_tiny_target` sizes one for the built-in tiny DeepSeek-V3 target (tiny/deepseek_v3.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..draft.arch import dflash
from .random_drafts import random_tensors, save_random, speculators_config, write_files


def dflash_draft_config(
    *,
    hidden=64,
    vocab=128,
    n_layers=1,
    heads=4,
    kv_heads=2,
    head_dim=16,
    intermediate=128,
    target_layer_ids=(0, 1, 2),
    block_size=8,
    mask_token_id=None,
    max_position_embeddings=8192,
    dtype="bfloat16",
    num_target_layers=8,
    **overrides,
) -> dict:
    """A DFlash draft config in SGLang's (z-lab's) layout; mask_token_id None: the vocabulary's last id;
    num_target_layers: the layer count of the target it is for (write_target_config's 8), at the top level as
    z-lab's, None: not recorded."""
    cfg = {
        "architectures": [dflash.ARCH],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": n_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": max_position_embeddings,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        **({"num_target_layers": num_target_layers} if num_target_layers is not None else {}),
        dflash.DFLASH: {
            "block_size": block_size,
            "target_layer_ids": list(target_layer_ids),
            "mask_token_id": vocab - 1 if mask_token_id is None else mask_token_id,
        },
    }
    cfg.update(overrides)
    return cfg


def dflash_tensors(cfg: dict, seed: int = 0) -> dict:
    """Checkpoint tensors for `cfg`: every tensor SGLang's DFlashDraftModel loads, shapes from the rules."""
    return random_tensors(cfg, dflash.REQUIRES, seed)[0]


def write_draft(out, cfg: dict, tensors: dict) -> Path:
    """Write (or rewrite, when `out` is one made here) a draft; a directory of anyone else's is refused."""
    return write_files(out, cfg, tensors, "tiny dflash draft")


def make_dflash_draft(out, seed: int = 0, **config) -> Path:
    """A well-formed DFlash draft in SGLang's layout (dflash_draft_config's keywords)."""
    cfg = dflash_draft_config(**config)
    return write_draft(out, cfg, dflash_tensors(cfg, seed))


def make_dflash_draft_for_tiny_target(out, target_dir, target_layer_ids=(0, 1, 2), **overrides) -> Path:
    """A DFlash draft for the built-in tiny DeepSeek-V3 target: its hidden size, vocabulary and context, fed the
    outputs of its layers `target_layer_ids` (0..n-2 on a target of n layers)."""
    t = json.loads((Path(target_dir) / "config.json").read_text())
    heads = t["num_attention_heads"]
    kw = dict(
        hidden=t["hidden_size"],
        vocab=t["vocab_size"],
        n_layers=2,
        heads=heads,
        kv_heads=max(1, heads // 4),
        head_dim=t["hidden_size"] // heads,
        intermediate=t["hidden_size"],
        target_layer_ids=target_layer_ids,
        max_position_embeddings=t["max_position_embeddings"],
        num_target_layers=t["num_hidden_layers"],
    )
    kw.update(overrides)
    return make_dflash_draft(out, **kw)


def make_speculators_dflash_draft(
    out,
    *,
    hidden: int = 64,
    vocab: int = 128,
    draft_vocab: int | None = None,
    aux_ids=(1, 2, 3),
    n_layers: int = 1,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 16,
    intermediate: int = 128,
    block_size: int = 8,
    mask_token_id: int | None = None,
    seed: int = 0,
    dtype=None,
    num_target_layers: int | None = 8,
    **config_overrides,
) -> Path:
    """A DFlash draft as speculators saves one (DFlashSpeculatorConfig + DFlashDraftModel.save_pretrained):
    aux_ids are HF hidden_states indices; draft_vocab (None: the full vocabulary) below vocab adds its d2t/t2d
    and reduced lm_head; mask_token_id None: the vocabulary's last id; num_target_layers: the target's layer
    count as `train --draft-arch dflash` records it (an extra field of speculators' config), None: not recorded."""
    import torch
    from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
    from transformers import Qwen3Config

    torch.manual_seed(seed)
    tl = Qwen3Config(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        max_position_embeddings=8192,
    )
    cfg = DFlashSpeculatorConfig(
        transformer_layer_config=tl,
        draft_vocab_size=draft_vocab or vocab,
        block_size=block_size,
        aux_hidden_state_layer_ids=list(aux_ids),
        mask_token_id=vocab - 1 if mask_token_id is None else mask_token_id,
        speculators_config=speculators_config("dflash", block_size - 1),
        **({"num_target_layers": num_target_layers} if num_target_layers is not None else {}),
        **config_overrides,
    )
    return save_random(DFlashDraftModel(cfg), out, vocab, "tiny speculators dflash draft", dtype)
