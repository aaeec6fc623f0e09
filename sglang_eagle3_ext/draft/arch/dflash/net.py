"""The DFlash draft as SGLang serves it (models/dflash.py `DFlashDraftModel` driven by speculative/dflash_worker_v2),
in plain PyTorch so that it runs anywhere (CPU included) without SGLang's KV cache or attention backends.

One verify round at anchor a (x_a the bonus token the target just produced, at position a):
- context: every earlier row r < a holds ctx_r = hidden_norm(fc(cat of the K target layer states of row r)); each
  layer materialises it into its KV cache as k_norm(k_proj(ctx_r)) with RoPE at position r and v_proj(ctx_r)
  (`kv_proj_only`; no input_layernorm on the context, the same ctx_r for every layer);
- block: [x_a, mask x (B-1)] at positions a..a+B-1, embedded with the target's embeddings; Qwen3-style layers
  (pre-norm, q_norm/k_norm per head, NeoX RoPE, the fused fp32 residual add), whose queries see the context and
  every key of their own block (ENCODER_ONLY: non-causal inside the block);
- the block's states after `norm` through the target's lm_head; the argmax at block positions 1..B-1 are the B-1
  draft tokens.
Parameters carry the checkpoint's names (`layers.N.self_attn.q_proj`, ..., `fc`, `hidden_norm`, `norm`) plus
`embed_tokens` and `lm_head`, which the loader fills from the target. tests/sglang_cpu/test_dflash_equiv.py holds
this to SGLang's own class run on CPU, tests/unit/draft/test_dflash_net.py to speculators' DFlashDraftModel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...nets.common import MLP, RMSNorm, inv_freq, reproduced, rotate


def dflash_config(cfg: dict) -> dict:
    d = cfg.get("dflash_config")
    return d if isinstance(d, dict) else {}


def context_count(cfg: dict) -> int:
    """K, the target layer states fc concatenates: len(target_layer_ids), else one per draft layer (SGLang's
    build_target_layer_ids default)."""
    ids = dflash_config(cfg).get("target_layer_ids", cfg.get("target_layer_ids"))
    return len(ids) if isinstance(ids, list) and ids else int(cfg["num_hidden_layers"])


def _unsupported(cfg: dict) -> str | None:
    if (cfg.get("hidden_act") or "silu") != "silu":
        return f"hidden_act {cfg['hidden_act']!r} (SGLang's DFlash drafts use silu)"
    if cfg.get("rope_is_neox_style", cfg.get("is_neox_style", True)) is False:
        return "rope_is_neox_style false"
    types = cfg.get("layer_types")
    if types is not None and any(t != "full_attention" for t in types):
        return f"layer_types {types!r} (sliding-window draft layers run causal windowed attention in SGLang)"
    mask = dflash_config(cfg).get("mask_token_id")
    if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < int(cfg["vocab_size"]):
        return (
            f"dflash_config.mask_token_id {mask!r} (SGLang then looks the mask token up in the tokenizer; eval "
            f"needs the id: add dflash_config.mask_token_id, the target's id of the mask token)"
        )
    return None


def add_norm(norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's fused RMSNorm(x, residual): the sum in fp32, the residual kept in the model's dtype."""
    s = x.float() + residual.float()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + norm.eps) * norm.weight.float()
    return y.to(x.dtype), s.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, eps = int(cfg["hidden_size"]), float(cfg.get("rms_norm_eps", 1e-6))
        self.heads = int(cfg["num_attention_heads"])
        self.kv_heads = int(cfg.get("num_key_value_heads") or self.heads)
        self.head_dim = int(cfg.get("head_dim") or h // self.heads)
        bias = bool(cfg.get("attention_bias", False))
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, eps)
        self.k_norm = RMSNorm(self.head_dim, eps)
        self.scale = self.head_dim**-0.5
        inv, self.pos_div = inv_freq(cfg, self.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        freqs = torch.outer(positions.reshape(-1).float() / self.pos_div, self.inv_freq)
        cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]
        return rotate(x.reshape(-1, *x.shape[-2:]), cos, sin).view(x.shape)

    def _kv(self, x: torch.Tensor, positions: torch.Tensor):
        """x [..., H] -> k (k_norm, RoPE) and v, each [..., kv_heads, d]."""
        k = self.k_norm(self.k_proj(x).unflatten(-1, (self.kv_heads, self.head_dim)))
        return self._rope(k, positions), self.v_proj(x).unflatten(-1, (self.kv_heads, self.head_dim))

    def context_kv(self, ctx: torch.Tensor, positions: torch.Tensor):
        """What the worker writes into this layer's KV cache for context rows ctx [S, H] at positions [S]."""
        return self._kv(ctx, positions)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx_k, ctx_v, visible: torch.Tensor):
        """x [N, B, H]: N blocks at positions [N, B]; ctx_k/ctx_v [S, kv_heads, d]; visible [N, S] bool: the context
        rows each block's queries see. Every query also sees all B keys of its own block. -> [N, B, H]."""
        N, B, _ = x.shape
        q = self._rope(self.q_norm(self.q_proj(x).unflatten(-1, (self.heads, self.head_dim))), positions)
        k, v = self._kv(x, positions)
        rep = self.heads // self.kv_heads
        qf = q.float()
        s_ctx = torch.einsum("nbhd,shd->nhbs", qf, ctx_k.float().repeat_interleave(rep, 1)) * self.scale
        s_ctx = s_ctx.masked_fill(~visible[:, None, None, :], float("-inf"))
        s_blk = torch.einsum("nbhd,nchd->nhbc", qf, k.float().repeat_interleave(rep, 2)) * self.scale
        w = torch.softmax(torch.cat([s_ctx, s_blk], -1), -1)
        S = ctx_k.shape[0]
        o = torch.einsum("nhbs,shd->nbhd", w[..., :S], ctx_v.float().repeat_interleave(rep, 1))
        o = o + torch.einsum("nhbc,nchd->nbhd", w[..., S:], v.float().repeat_interleave(rep, 2))
        return self.o_proj(o.to(x.dtype).reshape(N, B, -1))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, eps = int(cfg["hidden_size"]), float(cfg.get("rms_norm_eps", 1e-6))
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = MLP(h, int(cfg["intermediate_size"]))


class DFlashDraft(nn.Module):
    """State-dict keys = a DFlashDraftModel checkpoint's (SGLang's layout) plus the target's embed_tokens and
    lm_head. `drafts_block`: eval verifies the B-1 tokens of one block per round (acceptance/block.py)."""

    drafts_block = True

    def __init__(self, cfg: dict):
        super().__init__()
        h, eps = reproduced(cfg, _unsupported(cfg))
        self.cfg = cfg
        self.max_positions = None  # RoPE computed for any position
        self.n_aux = context_count(cfg)
        self.mask_token_id = int(dflash_config(cfg)["mask_token_id"])
        block = dflash_config(cfg).get("block_size", cfg.get("block_size"))
        self.block_size = int(block) if block is not None else 16  # SGLang's default without one
        self.embed_tokens = nn.Embedding(int(cfg["vocab_size"]), h)
        self.fc = nn.Linear(self.n_aux * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(int(cfg["num_hidden_layers"])))
        self.norm = RMSNorm(h, eps)
        self.lm_head = nn.Linear(h, int(cfg["vocab_size"]), bias=False)

    def project(self, target_states: torch.Tensor) -> torch.Tensor:
        """[T, K*H] -> the context rows [T, H], as project_target_hidden."""
        return self.hidden_norm(self.fc(target_states))

    def context(self, ctx: torch.Tensor, positions: torch.Tensor) -> list:
        """Per layer, the (k, v) [S, kv_heads, d] the worker materialises for projected context rows ctx [S, H]."""
        return [layer.self_attn.context_kv(ctx, positions) for layer in self.layers]

    def block_states(self, bonus: torch.Tensor, start: torch.Tensor, kv: list, visible: torch.Tensor, size: int):
        """The block's states after `norm`, [N, size, H]: N blocks [bonus_n, mask ...] at positions start_n ..
        start_n + size - 1, each seeing the context rows visible[n] ([N, S] bool) of the per-layer kv."""
        N = bonus.shape[0]
        ids = torch.full((N, size), self.mask_token_id, dtype=torch.long, device=bonus.device)
        ids[:, 0] = bonus
        positions = start[:, None] + torch.arange(size, device=bonus.device)
        x = self.embed_tokens(ids).to(self.fc.weight.dtype)
        residual = x
        for i, layer in enumerate(self.layers):
            if i == 0:
                h = layer.input_layernorm(x)
            else:
                h, residual = add_norm(layer.input_layernorm, x, residual)
            a = layer.self_attn(h, positions, *kv[i], visible)
            h, residual = add_norm(layer.post_attention_layernorm, a, residual)
            x = layer.mlp(h)
        return add_norm(self.norm, x, residual)[0]

    def forward(self, bonus, start, kv, visible, size: int | None = None) -> torch.Tensor:
        """The draft's logits at block positions 1..size-1, [N, size-1, V] (size: the config's block_size)."""
        states = self.block_states(bonus, start, kv, visible, size or self.block_size)
        return F.linear(states[:, 1:], self.lm_head.weight)


Net = DFlashDraft  # the net role: eval builds Net(config) (draft/arch.net)
