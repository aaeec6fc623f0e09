"""The Llama EAGLE-3 draft as SGLang's `LlamaForCausalLMEagle3` (models/llama_eagle3.py) computes it, in plain
PyTorch so that it runs anywhere (CPU included) without SGLang's distributed state.

Parameters carry the checkpoint's canonical names (`layers.N.self_attn.q_proj`, ..., `fc`, `norm`, `embed_tokens`,
`lm_head`: what SGLang's load_weights stacks into qkv_proj / gate_up_proj), so a checkpoint loads by name. The
math is SGLang's: layer 0 takes cat(input_layernorm(embed), hidden_norm(hidden)) and keeps `hidden` as its
residual; a later layer takes hidden_norm(hidden + residual) (the fused add); attention is GQA with NeoX RoPE
(default, linear or llama3 scaling, SGLang's formulas), scale head_dim^-0.5; post_attention_layernorm + SiLU MLP;
the final norm adds the residual, the state handed to the next draft step is the pre-norm residual (post-norm
with `norm_output`). tests/sglang_cpu/test_acceptance_equiv.py holds it to SGLang's own class run on CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from ...nets.common import MLP, AuxInput, RMSNorm, inv_freq, reproduced, rotate


class Attention(nn.Module):
    def __init__(self, cfg: dict, width: int):
        super().__init__()
        h = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.kv_heads = int(cfg.get("num_key_value_heads") or self.heads)
        self.head_dim = int(cfg.get("head_dim") or h // self.heads)
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.scale = self.head_dim**-0.5
        inv, self.pos_div = inv_freq(cfg, self.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """x [T, width] -> q [heads, T, d], k and v [kv_heads, T, d] (RoPE applied to q and k)."""
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.heads, self.head_dim)
        k = self.k_proj(x).view(T, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(T, self.kv_heads, self.head_dim)
        freqs = torch.outer(positions.float() / self.pos_div, self.inv_freq)
        cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]
        return rotate(q, cos, sin).transpose(0, 1), rotate(k, cos, sin).transpose(0, 1), v.transpose(0, 1)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: dict, first: bool):
        super().__init__()
        h, eps = int(cfg["hidden_size"]), float(cfg.get("rms_norm_eps", 1e-6))
        self.self_attn = Attention(cfg, 2 * h if first else h)
        self.mlp = MLP(h, int(cfg["intermediate_size"]))
        if first:  # later layers build one too in SGLang, but never use it
            self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)


def _unsupported(cfg: dict) -> str | None:
    if (cfg.get("hidden_act") or "silu") != "silu":
        return f"hidden_act {cfg['hidden_act']!r} (SGLang's EAGLE-3 drafts use silu)"
    if float(cfg.get("partial_rotary_factor") or 1) != 1:
        return "partial_rotary_factor != 1"
    if cfg.get("attention_bias") or cfg.get("bias"):
        return "attention/fc bias (SGLang then builds an o_proj bias no checkpoint key fills)"
    if cfg.get("rope_is_neox_style") is False:
        return "rope_is_neox_style false"
    if cfg.get("norm_before_fc") or (cfg.get("eagle_config") or {}).get("norm_before_fc"):
        return "norm_before_fc (SGLang 0.5.18+ input_norm)"
    return None


class LlamaEagle3Draft(AuxInput, nn.Module):
    """State-dict keys = the canonical checkpoint names of a LlamaForCausalLMEagle3 draft (draft/keys.canonical)."""

    def __init__(self, cfg: dict):
        super().__init__()
        h, eps = reproduced(cfg, _unsupported(cfg))
        self.cfg = cfg
        self.max_positions = None  # RoPE computed for any position
        target_h = int(cfg.get("target_hidden_size") or h)
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        self.n_aux = int(cfg.get("num_aux_hidden_states") or (len(ids) if ids else 3))
        self.embed_tokens = nn.Embedding(int(cfg["vocab_size"]), h)
        self.build_aux_input(cfg, target_h, h, eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i == 0) for i in range(int(cfg["num_hidden_layers"])))
        self.norm = RMSNorm(h, eps)
        self.norm_output = bool(cfg.get("norm_output", False))
        rows = int(cfg.get("draft_vocab_size") or cfg["vocab_size"])
        self.lm_head = nn.Linear(h, rows, bias=False)


Net = LlamaEagle3Draft  # the net role: eval builds Net(config) (draft/arch.net)
