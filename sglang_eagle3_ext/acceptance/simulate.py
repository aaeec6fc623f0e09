"""One verify round of SGLang's EAGLE-3 worker (`--speculative-eagle-topk 1`), simulated for every anchor of a
batch of recorded sequences at once.

Serving, for a request whose accepted context is x_0..x_a (x_a the bonus token the target just produced; the
target has states for rows 0..a-1), as eagle_worker_v2 does it:
- the draft's KV cache holds one target-fed row per position p < a: input token x_{p+1}, hidden fc(aux_p)
  (draft-extend after prefill and after each verify; its key/value depend on that row alone, so one causal
  pass over the whole sequence reproduces every round's cache);
- draft token 1 is the argmax of target-fed row a-1 (its draft-extend output), mapped to a target id by d2t;
- draft step k >= 1 runs at position a-1+k on (the draft token k, the state step k-1 returned) and attends to
  the target-fed rows 0..a-1 plus the draft's own rows of this round at positions a..a-1+k;
- the target accepts draft token k when it equals its own next token and every earlier one was accepted.
Here the target's next tokens are the recorded ones. Row p of step k is the chain of anchor a = p-k+1, so
step k is one batched forward over every row (the TTT layout of draft/arch/mla/net.forward_steps, with the
draft's own sampled tokens in place of the recorded ones).
"""

from __future__ import annotations

import dataclasses
import math

import torch

ATTN_BYTES = 1 << 29  # score block held at once per layer (fp32): bounds the attention's memory


@dataclasses.dataclass
class Packed:
    """Sequences packed into one row axis."""

    ids: torch.Tensor  # [T] recorded tokens
    aux: torch.Tensor  # [T, K*H] the target's aux states
    start: torch.Tensor  # [T] first row of the row's sequence
    end: torch.Tensor  # [T] one past the last row of the row's sequence
    local: torch.Tensor  # [T] position inside the sequence


def pack(samples, device, dtype) -> Packed:
    """samples: (ids [L], aux [L, K*H]) pairs."""
    ids = torch.cat([s[0] for s in samples]).to(device)
    aux = torch.cat([s[1] for s in samples]).to(device=device, dtype=dtype)
    lens = torch.tensor([int(s[0].shape[0]) for s in samples], device=device)
    first = torch.cumsum(lens, 0) - lens
    start = torch.repeat_interleave(first, lens)
    end = torch.repeat_interleave(first + lens, lens)
    return Packed(ids, aux, start, end, torch.arange(ids.shape[0], device=device) - start)


def _add_norm(norm, x, residual):
    """SGLang's fused RMSNorm(x, residual): the sum in fp32, the residual kept in the model's dtype, the norm of
    the fp32 sum."""
    s = x.float() + residual.float()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + norm.eps) * norm.weight.float()
    return y.to(x.dtype), s.to(x.dtype)


def _heads(t: torch.Tensor, n: int) -> torch.Tensor:
    """[kv_heads, T, d] -> [n, T, d]: head i reads kv head i // (n / kv_heads)."""
    return t if t.shape[0] == n else t.repeat_interleave(n // t.shape[0], dim=0)


def _attend(q, k0, v0, chain_k, chain_v, step: int, p: Packed, scale: float):
    """Row r attends to target-fed keys r' in its sequence with r' <= r - step, then to its chain's own keys
    (chain_k[j][:, r] = the key of draft step j+1 of row r's chain). Scores and softmax in fp32. -> [T, heads*dv]."""
    H, T, _ = q.shape
    out = torch.empty(T, H, v0.shape[-1], dtype=torch.float32, device=q.device)
    seq_max = max(int((p.end - p.start).max()), 1)
    # a block of rows sees keys from its first row's sequence start on: at most rows + seq_max of them
    chunk = max(1, min(ATTN_BYTES // (8 * H * seq_max), math.isqrt(ATTN_BYTES // (4 * H))))
    for r0 in range(0, T, chunk):
        r1 = min(T, r0 + chunk)
        ck = torch.stack([c[:, r0:r1] for c in chain_k], 2).float() if chain_k else None  # [H, rows, step, d]
        cv = torch.stack([c[:, r0:r1] for c in chain_v], 2).float() if chain_v else None
        k_lo, k_hi = int(p.start[r0]), max(int(p.start[r0]) + 1, r1 - step)
        rows = torch.arange(r0, r1, device=q.device)[:, None]
        keys = torch.arange(k_lo, k_hi, device=q.device)[None]
        qf = q[:, r0:r1].float()
        s = torch.einsum("htd,hsd->hts", qf, k0[:, k_lo:k_hi].float()) * scale
        visible = (keys >= p.start[r0:r1, None]) & (keys <= rows - step)
        s = s.masked_fill(~visible, float("-inf"))
        if ck is not None:
            s = torch.cat([s, torch.einsum("htd,htjd->htj", qf, ck) * scale], -1)
        w = torch.softmax(s, -1).nan_to_num(0.0)  # a row with no visible key (no chain there) stays finite
        o = torch.einsum("hts,hsd->htd", w[..., : k_hi - k_lo], v0[:, k_lo:k_hi].float())
        if cv is not None:
            o = o + torch.einsum("htj,htjd->htd", w[..., k_hi - k_lo :], cv)
        out[r0:r1] = o.transpose(0, 1)
    return out.reshape(T, -1).to(q.dtype)


def _forward(model, tokens, hidden, positions, p: Packed, step: int, caches: list):
    """One draft forward over every row. caches[l] = (k0, v0, [step-j keys], [step-j values]) of layer l;
    step 0 fills k0/v0, step k appends its own keys. Returns (logits, state)."""
    embeds = model.embed_tokens(tokens)
    residual = None
    for li, layer in enumerate(model.layers):
        attn = layer.self_attn
        if li == 0:
            residual = hidden
            x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], -1)
        else:
            x, residual = _add_norm(layer.hidden_norm, hidden, residual)
        q, k, v = attn.qkv(x, positions)
        H = q.shape[0]
        k, v = _heads(k, H), _heads(v, H)
        if step == 0:
            caches.append([k, v, [], []])
        else:
            cache = caches[li]
            idx = [(torch.arange(k.shape[1], device=k.device) - step + j).clamp(min=0) for j in range(1, step)]
            cache[2].append(k)
            cache[3].append(v)
            chain_k = [cache[2][j - 1][:, i] for j, i in zip(range(1, step), idx)] + [k]
            chain_v = [cache[3][j - 1][:, i] for j, i in zip(range(1, step), idx)] + [v]
        o = _attend(
            q, caches[li][0], caches[li][1], chain_k if step else [], chain_v if step else [], step, p, attn.scale
        )
        h, residual = _add_norm(layer.post_attention_layernorm, attn.o_proj(o), residual)
        hidden = layer.mlp(h)
    normed, residual = _add_norm(model.norm, hidden, residual)
    return model.lm_head(normed), (normed if model.norm_output else residual)


def draft_tokens(model, p: Packed, steps: int, hot: torch.Tensor | None) -> torch.Tensor:
    """[steps, T]: row r of step k = the target id draft step k+1 proposes on the chain whose target-fed row is
    r - k (anchor r - k + 1). Rows whose chain would start before their sequence are meaningless."""
    T = p.ids.shape[0]
    nxt = torch.where(p.local + 1 < p.end - p.start, torch.roll(p.ids, -1), p.ids)  # x_{r+1}; last row: unused
    hidden = model.project(p.aux)
    tokens, caches, out = nxt, [], []
    shift = torch.cat(
        [torch.zeros(1, dtype=torch.long, device=p.ids.device), torch.arange(T - 1, device=p.ids.device)]
    )  # row r reads row r-1
    for step in range(steps):
        logits, state = _forward(model, tokens, hidden, p.local, p, step, caches)
        ids = logits.argmax(-1)
        ids = hot[ids] if hot is not None else ids
        out.append(ids)
        tokens, hidden = ids[shift], state[shift]
    return torch.stack(out)


def run_lengths(proposed: torch.Tensor, p: Packed, region: torch.Tensor, steps: int):
    """Per anchor row c (= a-1): (accepted, known) where known = how many of x_{a+1}..x_{a+steps} are recorded
    inside the region without a gap, and accepted = leading draft tokens equal to them (<= known).
    region [T] bool: the positions a server would have generated (the response, or every position)."""
    T = p.ids.shape[0]
    dev = p.ids.device
    rows = torch.arange(T, device=dev)
    ok = torch.zeros(steps, T, dtype=torch.bool, device=dev)
    known = torch.zeros(steps, T, dtype=torch.bool, device=dev)
    for k in range(steps):
        tgt = rows + k + 2  # x_{a+k+1}
        valid = tgt < p.end
        tgt_c = tgt.clamp(max=T - 1)
        known[k] = valid & region[tgt_c] & (known[k - 1] if k else region[(rows + 1).clamp(max=T - 1)])
        src = (rows + k).clamp(max=T - 1)  # step k of chain c ran at row c + k
        ok[k] = known[k] & (proposed[k, src] == p.ids[tgt_c])
    accepted = torch.cumprod(ok.int(), 0).sum(0)
    return accepted, known.int().sum(0)
