"""The pieces every SGLang EAGLE-3 draft is built from, as SGLang computes them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
