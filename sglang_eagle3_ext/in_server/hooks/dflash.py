"""Patches of sglang.srt.models.dflash (0.5.14+, capability HAS_DFLASH): the DFlash draft class `DFlashDraftModel`.

Its load_weights skips every name it cannot resolve and never checks that each parameter got a tensor; the same
strict loading as the EAGLE-3 draft classes (see llama_eagle3.py for why the built-in class is patched in place)
with the DFlash rules of draft/arch. `project_target_hidden` (the only place fc meets the target's states) refuses
another width in one line naming the draft's K and the target layers it was trained on.

Subclasses that add their own parameters (DSpark, Laguna) inherit these methods; they load as SGLang loads them.
"""

from __future__ import annotations

from ..._log import log_once
from ._bind import arg, bind

LABEL = "DFlash"


def _own_class(instance) -> bool:
    """The instance is of a class a draft layout describes (not a subclass adding parameters the rules do not know)."""
    from ...draft import arch as layouts

    name = type(instance).__name__
    if layouts.find({"architectures": [name]}) is not None:
        return True
    log_once(
        f"dflash-subclass:{name}",
        "%s draft class %s: no draft layout describes it; loaded as SGLang loads it (no strict accounting)",
        LABEL,
        name,
    )
    return False


def strict_load_weights(wrapped, instance, args, kwargs):
    """DFlashDraftModel.load_weights(weights): normalise, load, account for every tensor and parameter."""
    if not _own_class(instance):
        return wrapped(*args, **kwargs)
    from ..draft.loader import strict_load

    return strict_load(wrapped, instance, bind(wrapped, args, kwargs)["weights"])


def _trained_layers(instance) -> list[int] | None:
    """The target layer ids the draft's fc takes (dflash_config.target_layer_ids, SGLang's parse), or None."""
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    try:
        ids = parse_dflash_draft_config(draft_hf_config=instance.config).target_layer_ids
    except ValueError:
        return None
    return list(ids) if ids else None


def fc_width_guard(wrapped, instance, args, kwargs):
    """DFlashDraftModel.project_target_hidden(target_hidden): refuse states of another width than fc takes."""
    from ..draft.guard import check_context_width

    hs = arg(wrapped, args, kwargs, "target_hidden")
    if hs is not None and getattr(hs, "ndim", 0) == 2:
        k = int(getattr(instance, "num_context_features", 0)) or 1
        check_context_width(instance.fc, hs, k, lambda: _trained_layers(instance), LABEL)
    return wrapped(*args, **kwargs)
