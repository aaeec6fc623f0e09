"""Patches of sglang.srt.models.llama_eagle3: strict load_weights and the fc width guard.

Why patch the built-in class in place rather than register our own architecture: every EAGLE-3
checkpoint in the wild says `architectures: ["LlamaForCausalLMEagle3"]`, and SGLang picks the class
from that string. Replacing methods on the built-in class means every such checkpoint gets strict
loading without editing its config, and `revert()` restores SGLang's behaviour exactly. A separate
registered class would only protect checkpoints we converted ourselves.
"""

from __future__ import annotations

from ._bind import arg, bind


def strict_load_weights(wrapped, instance, args, kwargs):
    """LlamaForCausalLMEagle3.load_weights(weights): normalise, load, account for every tensor."""
    from ..draft.loader import strict_load

    return strict_load(wrapped, instance, bind(wrapped, args, kwargs)["weights"])


def fc_width_guard(wrapped, instance, args, kwargs):
    """llama_eagle3.LlamaModel.forward(input_ids, positions, forward_batch, ...): refuse un-fused target states."""
    from ..draft.guard import check_width

    fb = arg(wrapped, args, kwargs, "forward_batch")
    if fb is not None:
        check_width(instance, fb)
    return wrapped(*args, **kwargs)
