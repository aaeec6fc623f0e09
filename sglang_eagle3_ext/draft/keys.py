"""Key names per SGLang release: one canonical spelling, renamed to what the installed release holds.

Canonical names are the speculators / SGLang>=0.5.14 spelling without prefixes:
`fc.weight`, `layers.N.*`, `norm.weight`, `lm_head.weight`, `embed_tokens.weight`, `d2t`, `t2d`,
`fc_norm.K.weight`, `input_norm.weight`.
"""
from __future__ import annotations

import dataclasses
import re

from .errors import UNSUPPORTED_BY_RELEASE, Problem

# The draft config field (inside `eagle_config`) holding the transformers-convention hidden-state
# indices the draft was trained on: index i = output of decoder layer i-1 = HF output_hidden_states[i].
HF_INDICES_FIELD = "hf_hidden_state_indices"

_PREFIXES = ("draft_model.", "module.", "model.")
_LEGACY = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1", "aux_norm_high": "fc_norm.2"}

# Tensors a checkpoint may carry that SGLang never needs from it (name -> why).
IGNORED = {
    "t2d": "target->draft mask; SGLang only uses d2t",
    "verifier_norm.weight": "speculators' training copy of the target's final norm",
    "verifier_lm_head.weight": "speculators' training copy of the target's lm_head",
}
_ROTARY = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a release's LlamaForCausalLMEagle3 can hold."""
    release: str
    midlayer: bool        # one `midlayer` (<=0.5.10), fc fixed to 3 aux states; else `layers.N`
    fc_norm: bool
    input_norm: bool
    norm_output: bool
    capture_always_plus_one: bool  # set_eagle3_layers_to_capture adds 1 to every id (<=0.5.10)
    mla_draft: bool = False        # the MLA draft class Eagle3DeepseekV2ForCausalLM exists (0.5.14+)

    @classmethod
    def from_caps(cls, caps) -> "Layout":
        return cls(release=caps.version, midlayer=caps.HAS_MIDLAYER and not caps.HAS_LAYERS_LIST,
                   fc_norm=caps.HAS_FC_NORM, input_norm=caps.HAS_INPUT_NORM,
                   norm_output=caps.HAS_NORM_OUTPUT,
                   capture_always_plus_one=caps.CAPTURE_ALWAYS_PLUS_ONE,
                   mla_draft=getattr(caps, "HAS_MLA_DRAFT", False))


def layout_for_version(version: str) -> Layout:
    """Offline (no SGLang installed): the release's flags from versions' per-release table."""
    from ..versions import capabilities_for_version

    return Layout.from_caps(capabilities_for_version(version))


def installed_layout() -> Layout:
    from ..versions import capabilities

    return Layout.from_caps(capabilities())


def resolve_layout(version: str | None) -> Layout:
    """--sglang X: the offline table; none: the installed release's capability flags."""
    if version:
        return layout_for_version(version)
    from ..versions import installed_version

    if installed_version() is None:
        raise SystemExit("SGLang is not installed here: pass --sglang X (e.g. 0.5.16), the release to judge for")
    return installed_layout()


def release_aux_ids(hf_indices: list[int], layout: Layout) -> tuple[list[int], str | None]:
    """eagle_aux_hidden_state_layer_ids that make an unpatched release capture `hf_indices`
    (loop index = HF index), and a warning when no such ids exist for that release."""
    hf = list(hf_indices)
    if layout.capture_always_plus_one:
        if min(hf) < 1:
            from ..versions import capabilities_for_version, layer0_refusal

            return hf, layer0_refusal(capabilities_for_version(layout.release)) or (
                f"SGLang {layout.release} adds 1 to every id, so HF index 0 cannot be expressed; serve with "
                f"sglang_eagle3_ext active")
        return [i - 1 for i in hf], None
    if hf and hf[0] == 1:
        return hf, (f"SGLang {layout.release} adds 1 to ids starting with 1, so HF indices {hf} are only captured "
                    f"exactly with sglang_eagle3_ext active (it reads {HF_INDICES_FIELD})")
    return hf, None


def canonical(name: str) -> tuple[str, list[str]]:
    """(canonical name, rename notes) for any accepted spelling (SGLang, SpecForge, EAGLE, speculators)."""
    notes = []
    stripped = True
    while stripped:
        stripped = False
        for p in _PREFIXES:
            if name.startswith(p):
                name = name[len(p):]
                notes.append(f"strip '{p}'")
                stripped = True
    if name.startswith("midlayer."):
        name = "layers.0." + name[len("midlayer."):]
        notes.append("midlayer.* -> layers.0.*")
    for old, new in _LEGACY.items():
        if name.startswith(old + "."):
            name = new + name[len(old):]
            notes.append(f"{old} -> {new}")
    return name, notes


def ignored_reason(canon: str, embed_from_target: bool) -> str | None:
    if canon in IGNORED:
        return IGNORED[canon]
    if _ROTARY.search(canon):
        return "rotary inv_freq is recomputed by SGLang"
    if canon == "embed_tokens.weight" and embed_from_target:
        return "SGLang replaces the draft's embeddings with the target's (target_hidden_size == hidden_size)"
    return None


_LAYER = re.compile(r"^layers\.(\d+)\.(.*)$")


def to_release(canon: str, layout: Layout, mla: bool = False) -> tuple[str | None, Problem | None]:
    """The name this release's load_weights understands, or a Problem saying why it cannot hold it.
    mla: the MLA draft class, whose load_weights maps `layers.0.*` itself in every release."""
    m = _LAYER.match(canon)
    if mla:
        if m and m.group(1) != "0":
            return None, Problem(UNSUPPORTED_BY_RELEASE, f"{canon}: SGLang's MLA EAGLE-3 draft has exactly one "
                                                         f"layer", key=canon)
        return canon, None
    if layout.midlayer and m:
        if m.group(1) != "0":
            return None, Problem(UNSUPPORTED_BY_RELEASE,
                                 f"{canon}: SGLang {layout.release} has exactly one draft layer (midlayer); "
                                 f"use SGLang >= 0.5.14 for multi-layer drafts", key=canon)
        return "midlayer." + m.group(2), None
    if canon.startswith("fc_norm.") and not layout.fc_norm:
        return None, Problem(UNSUPPORTED_BY_RELEASE,
                             f"{canon}: the draft was trained with per-aux fc_norm, which SGLang {layout.release} "
                             f"does not have (it would be ignored, acceptance collapses); use SGLang >= 0.5.14", key=canon)
    if canon.startswith("input_norm.") and not layout.input_norm:
        return None, Problem(UNSUPPORTED_BY_RELEASE,
                             f"{canon}: the draft was trained with norm_before_fc (input_norm), which SGLang "
                             f"{layout.release} does not have (it would be ignored); use SGLang >= 0.5.18", key=canon)
    return canon, None


def release_to_canonical_param(param_name: str) -> str:
    """`model.midlayer.self_attn.qkv_proj.weight` -> `layers.0.self_attn.qkv_proj.weight` (for messages)."""
    canon, _ = canonical(param_name)
    return canon


_STACKED = {".qkv_proj.": {"q": ".q_proj.", "k": ".k_proj.", "v": ".v_proj."},
            ".gate_up_proj.": {0: ".gate_proj.", 1: ".up_proj."}}


def expected_shards(param_canon: str) -> dict:
    """{shard_id: checkpoint key} that fill a (possibly stacked) SGLang parameter."""
    for fused, parts in _STACKED.items():
        if fused in param_canon:
            return {sid: param_canon.replace(fused, part) for sid, part in parts.items()}
    return {None: param_canon}


def summarize_renames(counts: dict[str, int]) -> str:
    return ", ".join(f"{note} ({n}x)" for note, n in sorted(counts.items())) or "none"
