"""fc input-width guard: a target-fed batch must carry exactly fc.in_features = K x target_hidden.

SGLang's draft applies fc only `if hidden_states.shape[-1] != embeds.shape[-1]`, so a target that
sends un-fused H-wide states skips the fc silently and serves at accept length 1.00. Draft decode
steps legitimately carry the draft's own H-wide states; they pass untouched (one int compare).
"""

from __future__ import annotations

from ...draft.errors import FC_WIDTH, DraftWidthError, Problem, width_message


def _target_fed(mode) -> bool:
    # Draft decode (DECODE) carries the draft's own states; IDLE carries none. Everything else
    # (EXTEND, DRAFT_EXTEND[_V2], MIXED, ...) comes from the target.
    return not (mode.is_decode() or mode.is_idle())


def fc_in_features(fc) -> int:
    """Input width of the draft's fc: nn.Linear (Llama draft; MLA draft <= 0.5.14) or SGLang's
    ColumnParallelLinear (MLA draft 0.5.16+), whose weight is split by output rows only."""
    n = getattr(fc, "in_features", None)
    return n if n is not None else fc.input_size


def check_width(draft_model, forward_batch) -> None:
    """draft_model: the draft's inner model (llama_eagle3.LlamaModel or kimi_k25_eagle3.Eagle3MLAModel)."""
    spec_info = getattr(forward_batch, "spec_info", None)
    hs = getattr(spec_info, "hidden_states", None)
    if hs is None:
        return
    need = fc_in_features(draft_model.fc)
    width = hs.shape[-1]
    if width == need:
        return
    mode = forward_batch.forward_mode
    if hs.shape[0] == 0 or not _target_fed(mode):
        return
    k = getattr(draft_model, "num_aux_hidden_states", 3)
    th = need // k
    msg = width_message(width, need, k, th, f"{getattr(mode, 'name', mode)} batch")
    raise DraftWidthError([Problem(FC_WIDTH, msg)], "EAGLE-3 draft refuses hidden states of the wrong width")


def context_width_message(sent: int, need: int, k: int, hidden: int, layers, label: str) -> str:
    """One line for a draft whose fc takes the target's states concatenated over `layers` (K of them) as
    need = K x hidden, while the target sends `sent`-wide states."""
    said = f"target layers {list(layers)}" if layers else f"{k} target layers"
    if sent == hidden:
        cause = (
            f"the target captures no layers for the draft: serve with --speculative-algorithm {label.upper()} "
            f"and a target model class that captures them"
        )
    elif sent % hidden == 0:
        cause = (
            f"the target captures {sent // hidden} layers, not the draft's {k}: name its trained layers in its config"
        )
    else:
        cause = f"{sent} is not a multiple of the draft's hidden size {hidden}: a draft trained for another target"
    return (
        f"{label} draft: the target sends {sent}-wide hidden states but the draft's fc needs {need} = "
        f"K({k}) x hidden({hidden}), the outputs of {said}; {cause}"
    )


def check_context_width(fc, target_hidden, k: int, layers, label: str) -> None:
    """A draft fed the target's states through fc alone (no embeddings beside them): any other width is refused
    in one line naming K and the layers, before fc raises or multiplies the wrong features. `layers`: a callable
    giving the target layer ids (read only for the message)."""
    need = fc_in_features(fc)
    width = int(target_hidden.shape[-1])
    if width == need:
        return
    msg = context_width_message(width, need, k, need // k, layers(), label)
    raise DraftWidthError([Problem(FC_WIDTH, msg)], f"{label} draft refuses hidden states of the wrong width")
