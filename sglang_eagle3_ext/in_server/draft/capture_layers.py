"""Making SGLang capture exactly the target hidden states the draft was trained on.

Convention (layers.py): HF index i = input of decoder layer i = DeepseekV2Model's loop index i, so
`layers_to_capture = hf_indices` captures exactly the recorded states, whatever the release's +1 rule.
"""

from __future__ import annotations

from ..._log import log_once
from ...draft import errors as E
from ...draft.errors import DraftLoadError, Problem
from ...draft.layers import AUX_IDS_FIELD, HF_INDICES_FIELD, recorded_hf_indices
from ...patching import bind
from ...server.startup import startup_context
from ...versions import layer0_refusal

TBO_FLAG = "--enable-two-batch-overlap"


def aux_capture_refusal(sa, who: str) -> str | None:
    """Why the target cannot hand aux hidden states to `who` (the dump, an EAGLE-3 draft) under the server args
    `sa`; None when it can. Under two-batch overlap DeepseekV2Model runs its layers from first_k_dense_replace
    on through model_forward_maybe_tbo, which captures no aux state: such batches arrive with too few layers
    (refused by the dump, or a packer error on 0.5.18+; a draft fed the wrong width)."""
    if sa is None or not getattr(sa, "enable_two_batch_overlap", False):
        return None
    return (
        f"{who} needs the target's aux hidden states, but {TBO_FLAG} runs DeepseekV2's MoE layers through the "
        f"two-batch-overlap path, which captures none of them: launch without {TBO_FLAG}"
    )


def _refuse_layer0(layers: list[int], where: str) -> None:

    why = layer0_refusal() if 0 in layers else None
    if why:
        raise DraftLoadError(
            [Problem(E.LAYER_INDEX, f"{where}: captures HF hidden_states{layers}; {why}")],
            "EAGLE-3 capture layers cannot be captured by this SGLang release:",
        )


def draft_k(cfg: dict) -> int | None:
    ec = cfg.get("eagle_config") or {}
    ids = ec.get(AUX_IDS_FIELD)
    return cfg.get("num_aux_hidden_states") or (len(ids) if ids else None)


def set_capture_layers(wrapped, instance, args, kwargs):
    ctx = startup_context()
    why = aux_capture_refusal(ctx.server_args, "the EAGLE-3 draft")
    if why:
        raise DraftLoadError([Problem(E.UNSUPPORTED_OPTION, why)], "EAGLE-3 target cannot feed its draft:")
    result = wrapped(*args, **kwargs)
    call = bind(wrapped, args, kwargs)
    if instance is None:  # called through the class: Cls.set_eagle3_layers_to_capture(model, ids)
        instance = call.get("self")
    layer_ids = call.get("layer_ids")
    pp = getattr(instance, "pp_group", None)
    if pp is not None and not pp.is_last_rank:
        return result
    n = instance.config.num_hidden_layers
    release_choice = list(instance.model.layers_to_capture)
    path, cfg = ctx.draft_path, ctx.draft_config or {}
    hf = recorded_hf_indices(cfg)
    k = draft_k(cfg)
    where = f"draft {path}" if path else "draft"
    if hf is not None:
        bad = [i for i in hf if not (isinstance(i, int) and 0 <= i < n)]
        if bad:
            raise DraftLoadError(
                [
                    Problem(
                        E.LAYER_INDEX,
                        f"{where}: {HF_INDICES_FIELD}={hf} but the target has {n} "
                        f"layers (capturable HF hidden_states[0..{n - 1}])",
                    )
                ],
                "EAGLE-3 capture layers do not fit the target:",
            )
        if k is not None and len(hf) != k:
            raise DraftLoadError(
                [
                    Problem(
                        E.AUX_COUNT,
                        f"{where}: {HF_INDICES_FIELD}={hf} has {len(hf)} entries, the "
                        f"draft's fc takes K={k} aux states",
                    )
                ],
                "EAGLE-3 capture layers do not match the draft:",
            )
        instance.model.layers_to_capture = list(hf)
        instance.capture_aux_hidden_states = True
        log_once(
            "capture-explicit",
            "EAGLE-3 target captures HF hidden_states%s as recorded in %s (%s); the "
            "release's rule on ids %s would have captured %s",
            list(hf),
            where,
            HF_INDICES_FIELD,
            layer_ids,
            release_choice,
        )
    else:
        if k is not None and layer_ids is not None and len(release_choice) != k:
            raise DraftLoadError(
                [
                    Problem(
                        E.AUX_COUNT,
                        f"{where}: target will capture {len(release_choice)} layers "
                        f"{release_choice} but the draft's fc takes K={k}",
                    )
                ],
                "EAGLE-3 capture layers do not match the draft:",
            )
        log_once(
            "capture-release-rule",
            "EAGLE-3 draft records no %s; SGLang's rule on ids %s captures HF "
            "hidden_states%s (loop index = HF index) — record the trained indices with "
            "`python -m sglang_eagle3_ext.convert` to make this explicit",
            HF_INDICES_FIELD,
            layer_ids,
            release_choice,
        )
    _refuse_layer0(list(instance.model.layers_to_capture), where)
    return result
