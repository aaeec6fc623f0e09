"""Patches of sglang.srt.models.kimi_k25_eagle3 (0.5.14+, capability HAS_MLA_DRAFT): the MLA EAGLE-3 draft
class `Eagle3DeepseekV2ForCausalLM` that serves Kimi-K2.5/K2.6's published drafts. Same strict loading and
fc width guard as the Llama draft class (see llama_eagle3.py for why the built-in class is patched in place);
the MLA-specific rules live in draft/mla.py.
"""
from __future__ import annotations


def strict_load_weights(wrapped, instance, args, kwargs):
    """Eagle3DeepseekV2ForCausalLM.load_weights(weights): normalise, load (the release fuses q/kv_a and splits
    kv_b_proj itself), then account for every tensor and every parameter."""
    from ..draft.loader import strict_load

    weights = args[0] if args else kwargs["weights"]
    return strict_load(wrapped, instance, weights)


def fc_width_guard(wrapped, instance, args, kwargs):
    """Eagle3MLAModel.forward(input_ids, positions, forward_batch, ...): refuse un-fused target states."""
    from ..draft.guard import check_width

    fb = kwargs.get("forward_batch")
    if fb is None and len(args) > 2:
        fb = args[2]
    if fb is not None:
        check_width(instance, fb)
    return wrapped(*args, **kwargs)
