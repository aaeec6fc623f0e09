"""Key names per SGLang release: one canonical spelling, renamed to what the installed release holds.

Canonical names are the speculators / SGLang>=0.5.14 spelling without prefixes:
`fc.weight`, `layers.N.*`, `norm.weight`, `lm_head.weight`, `embed_tokens.weight`, `d2t`, `t2d`,
`fc_norm.K.weight`, `input_norm.weight`.
"""

from __future__ import annotations

import dataclasses
import re

from ..boundary import BadInput
from ..versions import capabilities_for_version

# The draft config field holding the HF indices the draft was trained on, and the release's +1 rule: layers.py.
from .layers import HF_INDICES_FIELD, release_aux_ids  # noqa: F401 - re-exported

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
    """What a release's draft classes can hold (the Llama class's options; which classes exist: flags)."""

    release: str
    midlayer: bool  # one `midlayer` (<=0.5.10), fc fixed to 3 aux states; else `layers.N`
    fc_norm: bool
    input_norm: bool
    norm_output: bool
    capture_always_plus_one: bool  # set_eagle3_layers_to_capture adds 1 to every id (<=0.5.10)
    flags: frozenset = frozenset()  # the release's capability flags that hold (a draft layout's class: REQUIRES)

    @classmethod
    def from_caps(cls, caps) -> "Layout":
        return cls(
            release=caps.version,
            midlayer=caps.HAS_MIDLAYER and not caps.HAS_LAYERS_LIST,
            fc_norm=caps.HAS_FC_NORM,
            input_norm=caps.HAS_INPUT_NORM,
            norm_output=caps.HAS_NORM_OUTPUT,
            capture_always_plus_one=caps.CAPTURE_ALWAYS_PLUS_ONE,
            flags=frozenset(k for k, v in vars(caps).items() if v is True),
        )

    def has(self, flag: str | None) -> bool:
        """Whether the release has capability `flag` (None: nothing required)."""
        return flag is None or flag in self.flags


def layout_for_version(version: str) -> Layout:
    """Offline (no SGLang installed): the release's flags from versions' per-release table."""

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
        raise BadInput("", "SGLang is not installed here: pass --sglang X (e.g. 0.5.16), the release to judge for")
    return installed_layout()


def canonical(name: str) -> tuple[str, list[str]]:
    """(canonical name, rename notes) for any accepted spelling (SGLang, SpecForge, EAGLE, speculators)."""
    notes = []
    stripped = True
    while stripped:
        stripped = False
        for p in _PREFIXES:
            if name.startswith(p):
                name = name[len(p) :]
                notes.append(f"strip '{p}'")
                stripped = True
    if name.startswith("midlayer."):
        name = "layers.0." + name[len("midlayer.") :]
        notes.append("midlayer.* -> layers.0.*")
    for old, new in _LEGACY.items():
        if name.startswith(old + "."):
            name = new + name[len(old) :]
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


LAYER = re.compile(r"^layers\.(\d+)\.(.*)$")  # canonical decoder-layer keys: layers.N.rest


def release_to_canonical_param(param_name: str) -> str:
    """`model.midlayer.self_attn.qkv_proj.weight` -> `layers.0.self_attn.qkv_proj.weight` (for messages)."""
    canon, _ = canonical(param_name)
    return canon


_STACKED = {
    ".qkv_proj.": {"q": ".q_proj.", "k": ".k_proj.", "v": ".v_proj."},
    ".gate_up_proj.": {0: ".gate_proj.", 1: ".up_proj."},
}


def expected_shards(param_canon: str) -> dict:
    """{shard_id: checkpoint key} that fill a (possibly stacked) SGLang parameter."""
    for fused, parts in _STACKED.items():
        if fused in param_canon:
            return {sid: param_canon.replace(fused, part) for sid, part in parts.items()}
    return {None: param_canon}


def summarize_renames(counts: dict[str, int]) -> str:
    return ", ".join(f"{note} ({n}x)" for note, n in sorted(counts.items())) or "none"
