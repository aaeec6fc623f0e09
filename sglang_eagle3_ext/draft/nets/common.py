"""The pieces SGLang's drafts are built from, as SGLang computes them: RMSNorm, the SiLU MLP, the aux-state
input, NeoX RoPE (default, linear or llama3 scaling) as get_rope builds it for Llama and Qwen3 layers."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...boundary import BadInput


class RMSNorm(nn.Module):
    """SGLang's RMSNorm.forward_native without a residual: fp32 statistics, cast back."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dt)


class MLP(nn.Module):
    """SGLang's dense SiLU MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, h: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class AuxInput(nn.Module):
    """The draft's input from the target: fc over the K concatenated aux states, each chunk normed first when the
    draft was trained with fc_norm (EAGLE-3.1). Mixed into a draft module, which owns `fc` and `fc_norm`."""

    def build_aux_input(self, cfg: dict, target_h: int, h: int, eps: float, bias: bool = False) -> None:
        self.fc = nn.Linear(target_h * self.n_aux, h, bias=bias)
        self.fc_norm = (
            nn.ModuleList(RMSNorm(target_h, eps) for _ in range(self.n_aux))
            if cfg.get("fc_norm") or cfg.get("use_aux_norm")
            else None
        )

    def project(self, target_states: torch.Tensor) -> torch.Tensor:
        """[T, K*H_target] -> [T, H], as SGLang's fc path."""
        if self.fc_norm is not None:
            chunks = target_states.chunk(self.n_aux, dim=-1)
            target_states = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], -1)
        return self.fc(target_states)


ROPE_TYPES = ("default", "linear", "llama3")


def _rope_scaling(cfg: dict) -> dict | None:
    """The scaling dict SGLang's LlamaAttention passes to get_rope (rope_parameters first, as SGLang reads it)."""
    rs = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not rs:
        return None
    kind = rs.get("rope_type") or rs.get("type") or "default"
    if kind not in ROPE_TYPES or "mrope_section" in rs:
        raise BadInput(
            "draft config.json: rope scaling",
            f"{kind!r} is not one eval reproduces (it does {', '.join(ROPE_TYPES)}); evaluate the draft by serving it",
        )
    return None if kind == "default" else dict(rs, rope_type=kind)


def _theta(cfg: dict) -> float:
    rp = cfg.get("rope_parameters") or {}
    return float(rp.get("rope_theta") or cfg.get("rope_theta") or 10000.0)


def inv_freq(cfg: dict, dim: int) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [dim/2], position divisor) as SGLang's RotaryEmbedding / Llama3RotaryEmbedding /
    LinearScalingRotaryEmbedding build them."""
    inv = 1.0 / (_theta(cfg) ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    rs = _rope_scaling(cfg)
    if rs is None:
        return inv, 1.0
    factor = float(rs.get("factor", 1.0))
    if rs["rope_type"] == "linear":
        return inv, factor
    low, high = float(rs.get("low_freq_factor", 1.0)), float(rs.get("high_freq_factor", 4.0))
    orig = float(rs.get("original_max_position_embeddings") or cfg.get("max_position_embeddings") or 8192)
    wave = 2 * math.pi / inv
    smooth = (orig / wave - low) / (high - low) if low != high else 0
    scaled = torch.where(
        wave < orig / high,
        inv,
        torch.where(wave > orig / low, inv / factor, (1 - smooth) * inv / factor + smooth * inv),
    )
    return scaled, 1.0


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX rotation (halves), in fp32 like SGLang's fp32 cos/sin cache, cast back."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


def reproduced(cfg: dict, why: str | None) -> tuple[int, float]:
    """(hidden size, RMSNorm eps) of a draft config eval reproduces; `why`: what of it eval does not reproduce
    (None: nothing), refused as BadInput."""
    if why:
        raise BadInput("draft config.json", f"{why}: eval does not reproduce it; evaluate the draft by serving it")
    return int(cfg["hidden_size"]), float(cfg.get("rms_norm_eps", 1e-6))
