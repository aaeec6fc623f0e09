"""One verify round of SGLang's DFLASH worker (speculative/dflash_worker_v2), simulated for every anchor of a batch
of recorded sequences at once, for a draft whose network proposes a block (its network class's `drafts_block`).

Serving, for a request whose accepted context is x_0..x_a (x_a the bonus token the target just produced; the
draft's KV cache holds one context row per position p < a, written from the target's states of row p after the
prefill and after each verify's committed tokens, so it depends on that row alone):
- the draft runs once on the block [x_a, mask x (B-1)] at positions a..a+B-1 (B = --speculative-num-draft-tokens,
  the block size) and proposes the argmax at block positions 1..B-1: draft tokens 1..B-1 all at once;
- the target verifies the block [x_a, d_1..d_{B-1}] and accepts d_k while it equals its own next token and every
  earlier one was accepted (compute_dflash_correct_drafts_and_bonus); the round commits accepted + 1 tokens
  (accept_lens = commit_lens), which SGLang's accept length counts as accepted drafts + 1, as for EAGLE-3.
Here the target's next tokens are the recorded ones, so a round of B-1 drafts is judged exactly as a chain of
steps = B-1 (simulate.run_lengths), from proposals laid out as simulate.draft_tokens lays them out. Unlike a
chain, every proposal depends on the block's size (the block attends to all its mask tokens): a shorter run
is not a prefix of a longer one, so each steps count is simulated on its own.
"""

from __future__ import annotations

import math

import torch

from .simulate import ATTN_BYTES, Packed


def drafts_block(model) -> bool:
    """Whether the draft's network proposes a block per round (draft/arch/<layout>/net.py: its `Net.drafts_block`)."""
    return bool(getattr(model, "drafts_block", False))


def _chunk(model, p: Packed, size: int) -> int:
    """Anchors per forward: their scores (fp32, every head, each block's queries against the context it sees
    and its own block) and their logits within ATTN_BYTES."""
    heads = max(layer.self_attn.heads for layer in model.layers)
    seq_max = max(int((p.end - p.start).max()), 1)
    vocab = model.lm_head.weight.shape[0]
    per_key = 4 * heads * size
    return max(
        1,
        min(
            ATTN_BYTES // (per_key * (seq_max + size)),
            math.isqrt(ATTN_BYTES // per_key),
            ATTN_BYTES // (4 * vocab * size),
        ),
    )


def block_tokens(model, p: Packed, steps: int, hot: torch.Tensor | None) -> torch.Tensor:
    """[T, steps]: row a = the target ids the block of anchor a (bonus x_a at row a, context rows of its
    sequence before a) proposes at block positions 1..steps."""
    T, dev = p.ids.shape[0], p.ids.device
    ctx = model.project(p.aux)
    kv = model.context(ctx, p.local)
    out = torch.empty(T, steps, dtype=torch.long, device=dev)
    chunk = _chunk(model, p, steps + 1)
    for r0 in range(0, T, chunk):
        r1 = min(T, r0 + chunk)
        lo, hi = int(p.start[r0]), max(int(p.start[r0]), r1 - 1)  # the rows any of these anchors sees
        rows = torch.arange(r0, r1, device=dev)[:, None]
        keys = torch.arange(lo, hi, device=dev)[None]
        visible = (keys >= p.start[r0:r1, None]) & (keys < rows)
        logits = model(p.ids[r0:r1], p.local[r0:r1], [(k[lo:hi], v[lo:hi]) for k, v in kv], visible, steps + 1)
        ids = logits.argmax(-1)
        out[r0:r1] = hot[ids] if hot is not None else ids
    return out


def draft_tokens(model, p: Packed, steps: int, hot: torch.Tensor | None) -> torch.Tensor:
    """[steps, T] in simulate.draft_tokens' layout: row r of step k = draft token k+1 of the round whose anchor
    row is r - k + 1 (its chain's target-fed row r - k), so simulate.run_lengths judges it."""
    by_anchor = block_tokens(model, p, steps, hot)
    return torch.stack([torch.roll(by_anchor[:, k], k - 1) for k in range(steps)])
