"""A trainable PyTorch twin of SGLang's `Eagle3DeepseekV2ForCausalLM` (models/kimi_k25_eagle3.py).

Same parameters under the names SGLang's `load_weights` reads (`layers.0.self_attn.q_a_proj` +
`kv_a_proj_with_mqa`, which it fuses; `layers.0.mlp.gate_proj`/`up_proj`, which it stacks; `fc`, `norm`,
`embed_tokens`, `lm_head`), and the same forward: fc over the K concatenated target states (only when the
input is target-wide), pre-attention input = cat(input_layernorm(embed), hidden_norm(hidden)) into MLA
with DeepSeek's interleaved RoPE (YaRN + mscale when the config has it), dense SiLU MLP, final norm; the
state handed to the next draft step is the pre-norm residual (post-norm with `norm_output`).
tests/sglang_cpu/test_mla_draft_equiv.py holds this to SGLang's own class run on CPU.

Training form: `forward_steps` runs the multi-step (TTT) unroll on one packed sequence: step k feeds the
state step k-1 produced one position earlier, and its queries see the target-fed (step 0) keys up to
k positions back plus their own diagonal of each later step -- what the draft's KV cache holds at draft
step k when serving.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...nets.common import MLP, AuxInput, RMSNorm

# config keys copied from the target's (text) config into the draft config
MLA_KEYS = (
    "num_attention_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_dim(rot: float, dim: int, base: float, max_pos: int) -> float:
    return (dim * math.log(max_pos / (rot * 2 * math.pi))) / (2 * math.log(base))


def rope_tables(cfg: dict, max_pos: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """cos/sin [max_pos, rope_dim/2] and the attention-scale factor, as SGLang builds them for MLA
    (plain RoPE, or DeepseekScalingRotaryEmbedding + compute_mla_mscale_scaling for YaRN)."""
    dim = int(cfg["qk_rope_head_dim"])
    base = float(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 10000.0)
    rs = rope_scaling_of(cfg)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    if rs is None:
        inv, mscale, attn = 1.0 / pos_freqs, 1.0, 1.0
    else:
        f = float(rs.get("factor", 1.0))
        orig = int(rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"])
        low = max(math.floor(_yarn_dim(rs.get("beta_fast", 32), dim, base, orig)), 0)
        high = min(math.ceil(_yarn_dim(rs.get("beta_slow", 1), dim, base, orig)), dim - 1)
        high = high + 0.001 if low == high else high
        ramp = ((torch.arange(dim // 2, dtype=torch.float) - low) / (high - low)).clamp(0, 1)
        keep = (1 - ramp) * float(rs.get("extrapolation_factor", 1.0))
        inv = (1.0 / (f * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep
        mscale = (
            _yarn_mscale(f, float(rs.get("mscale", 1.0)))
            / _yarn_mscale(f, float(rs.get("mscale_all_dim", 0.0)))
            * float(rs.get("attn_factor", 1.0))
        )
        mad = rs.get("mscale_all_dim", False)
        attn = _yarn_mscale(f, float(mad)) ** 2 if mad and rs.get("apply_yarn_scaling", True) else 1.0
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float), inv)
    return freqs.cos() * mscale, freqs.sin() * mscale, attn


def rope_scaling_of(cfg: dict) -> dict | None:
    rs = cfg.get("rope_scaling") or None
    if rs is None:
        rp = cfg.get("rope_parameters") or {}
        rs = rp if rp.get("rope_type", "default") not in ("default", None) else None
    if rs is not None and (rs.get("rope_type") or rs.get("type")) not in ("yarn", "deepseek_yarn"):
        raise ValueError(f"MLA draft: rope scaling {rs} is not YaRN (only plain RoPE and YaRN are supported)")
    return rs


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved (GPT-J) rotation, DeepSeek's `rope_interleave` default: pairs (0,1), (2,3), ..."""
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return torch.stack((o1, o2), dim=-1).flatten(-2).to(x.dtype)


class MLAAttention(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, self.heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        self.q_lora, self.kv_lora = int(cfg["q_lora_rank"]), int(cfg["kv_lora_rank"])
        self.nope, self.rope, self.v_dim = (
            int(cfg["qk_nope_head_dim"]),
            int(cfg["qk_rope_head_dim"]),
            int(cfg["v_head_dim"]),
        )
        eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.q_a_proj = nn.Linear(2 * h, self.q_lora, bias=False)
        self.q_a_layernorm = RMSNorm(self.q_lora, eps)
        self.q_b_proj = nn.Linear(self.q_lora, self.heads * (self.nope + self.rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(2 * h, self.kv_lora + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, eps)
        self.kv_b_proj = nn.Linear(self.kv_lora, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, h, bias=False)
        cos, sin, attn = rope_tables(cfg, int(cfg["max_position_embeddings"]))
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.scale = (self.nope + self.rope) ** -0.5 * attn

    def qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """x [T, 2H] -> q, k [heads, T, nope+rope], v [heads, T, v_dim]."""
        T = x.shape[0]
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(T, self.heads, self.nope + self.rope)
        latent = self.kv_a_proj_with_mqa(x)
        c, k_pe = latent.split([self.kv_lora, self.rope], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(T, self.heads, self.nope + self.v_dim)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        cos, sin = self.cos[positions], self.sin[positions]
        q_pe = apply_rope(q[..., self.nope :], cos[:, None], sin[:, None])
        k_pe = apply_rope(k_pe, cos, sin)[:, None].expand(T, self.heads, self.rope)
        q = torch.cat([q[..., : self.nope], q_pe], -1)
        k = torch.cat([k_nope, k_pe], -1)
        return q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)

    def attend(self, q, k, v, mask: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """q [heads, T, d], k/v [heads, S, d], mask [T, S] (True = visible), bias [T, S] added to the visible
        scores (training only) -> [T, H]."""
        if bias is not None:
            mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf")) + bias.to(
                q.dtype
            )
        out = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask[None, None], scale=self.scale)
        return self.o_proj(out[0].transpose(0, 1).reshape(q.shape[1], -1))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        h, eps = int(cfg["hidden_size"]), float(cfg.get("rms_norm_eps", 1e-6))
        self.self_attn = MLAAttention(cfg)
        self.mlp = MLP(h, int(cfg["intermediate_size"]))
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)


class Eagle3MLADraft(AuxInput, nn.Module):
    """State-dict keys = the checkpoint layout SGLang's Eagle3DeepseekV2ForCausalLM.load_weights reads."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        self.max_positions = int(cfg["max_position_embeddings"])  # its RoPE table's length (no row past it)
        h, eps = int(cfg["hidden_size"]), float(cfg.get("rms_norm_eps", 1e-6))
        if int(cfg.get("num_hidden_layers", 1)) != 1:
            raise ValueError("SGLang's MLA EAGLE-3 draft has exactly one layer (num_hidden_layers=1)")
        target_h = int(cfg.get("target_hidden_size") or h)
        self.n_aux = len((cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
        self.embed_tokens = nn.Embedding(int(cfg["vocab_size"]), h)
        self.build_aux_input(cfg, target_h, h, eps, bias=bool(cfg.get("bias", False)))
        self.layers = nn.ModuleList([DecoderLayer(cfg)])
        self.norm = RMSNorm(h, eps)
        self.norm_output = bool(cfg.get("norm_output", False))
        self.lm_head = nn.Linear(h, int(cfg.get("draft_vocab_size") or cfg["vocab_size"]), bias=False)

    def _pre(self, input_ids, hidden):
        layer = self.layers[0]
        x = torch.cat([layer.input_layernorm(self.embed_tokens(input_ids)), layer.hidden_norm(hidden)], -1)
        return layer, x

    def _post(self, layer, attn_out, residual):
        residual = attn_out + residual
        residual = layer.mlp(layer.post_attention_layernorm(residual)) + residual
        normed = self.norm(residual)
        return normed, (normed if self.norm_output else residual)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor, seq_lens: list[int] | None = None
    ):
        """One packed extend (causal per sequence), as SGLang runs the draft on target-fed states.
        hidden: [T, K*H_target] (fc applied) or [T, H] (the draft's own states). Returns logits, next-step state."""
        if hidden.shape[-1] != self.embed_tokens.embedding_dim:
            hidden = self.project(hidden)
        layer, x = self._pre(input_ids, hidden)
        q, k, v = layer.self_attn.qkv(x, positions)
        T = input_ids.shape[0]
        seq = torch.repeat_interleave(
            torch.arange(len(seq_lens or [T]), device=x.device), torch.tensor(seq_lens or [T], device=x.device)
        )
        mask = (seq[:, None] == seq[None, :]) & torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        normed, state = self._post(layer, layer.self_attn.attend(q, k, v, mask), hidden)
        return self.lm_head(normed), state

    def forward_steps(self, input_ids: torch.Tensor, target_states: torch.Tensor, steps: int, self_bias: float = 0.0):
        """TTT unroll on one sequence. input_ids[p] = token p+1 (the token after the target state p);
        target_states [T, K*H]. Returns one logits tensor [T, V] per step; row p of step k predicts the
        token two after the target's position p, from a state chain k steps long (rows p < k are unused).
        self_bias > 0 adds that much to each query's score for its own key (a training warm-up, see
        training/mla/step.self_bias_at: the token to pass on enters only through the attention's value of its own row)."""
        T = input_ids.shape[0]
        pos = torch.arange(T, device=input_ids.device)
        layer = self.layers[0]
        hidden = self.project(target_states)
        ks, vs, out = [], [], []
        tril = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()
        eye = torch.eye(T, dtype=torch.bool, device=input_ids.device)
        for k in range(steps):
            _, x = self._pre(input_ids, hidden)
            q, kk, vv = layer.self_attn.qkv(x, pos)
            ks.append(kk)
            vs.append(vv)
            # step-0 keys up to k positions back (the target-fed cache), then step j's key at p-k+j
            masks = [torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=-k)] if k else [tril]
            masks += [torch.roll(eye, shifts=-(k - j), dims=1) & tril for j in range(1, k + 1)]
            mask = torch.cat(masks, dim=1)
            mask[:k, :] = False
            mask[:k, 0] = True  # rows p < k have no valid chain; keep softmax finite
            bias = None
            if self_bias:
                bias = torch.zeros(mask.shape, device=x.device)
                bias[:, k * T :] = eye.float() * self_bias  # the own key: this step's block, same row
            attn = layer.self_attn.attend(q, torch.cat(ks, 1), torch.cat(vs, 1), mask, bias)
            normed, state = self._post(layer, attn, hidden)
            out.append(self.lm_head(normed))
            # step k+1 at position p continues the chain of position p-1
            hidden = torch.cat([hidden[:1], state[:-1]], 0)
        return out


Net = Eagle3MLADraft  # the net role: eval builds Net(config) (draft/arch.net)
