"""The loss mask an export gives a sample when none is given (`dump run --generate` records its own)."""

from __future__ import annotations


def default_loss_mask(rec: dict, length: int) -> list[int]:
    """A prompt+response sample (dump while serving EAGLE-3: its manifest record has verify tokens) trains on
    the response, the tokens after the request's prompt; any other sample on every token."""
    p = rec.get("prompt_len")
    if rec.get("verify_tokens") and isinstance(p, int) and 0 < p < length:
        return [0] * p + [1] * (length - p)
    return [1] * length
