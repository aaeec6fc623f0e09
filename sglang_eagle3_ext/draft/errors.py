"""Problem codes and the exceptions people see.

Every rule produces `Problem`s with a stable code (tests and scripts match on it) and a message
written for a person: which file, which key, expected vs actual, and the fix.
"""

from __future__ import annotations

import dataclasses

# One code per distinct failure; `check` and the loader use the same ones.
MISSING_WEIGHT = "missing-weight"
UNEXPECTED_WEIGHT = "unexpected-weight"
SHAPE = "shape-mismatch"
FC_UNFUSED = "fc-unfused"  # fc is 1xH wide: takes a single target layer
AUX_COUNT = "aux-count-mismatch"  # fc width says K aux layers, config says another K
D2T_LENGTH = "d2t-length"
D2T_RANGE = "d2t-range"
NON_FINITE = "non-finite"
BAD_FILE = "bad-safetensors"  # truncated / corrupt header
PICKLE_ONLY = "pickle-checkpoint"
NO_WEIGHTS = "no-weights"
CONFIG_MISSING = "config-missing-field"
CONFIG_INVALID = "config-invalid"
UNSUPPORTED_OPTION = "unsupported-option"  # trained with something SGLang cannot reproduce
UNSUPPORTED_BY_RELEASE = "unsupported-by-release"  # key/option this SGLang release would ignore
TARGET_MISMATCH = "target-mismatch"  # hidden/vocab differ from the target model
LAYER_INDEX = "capture-layer-index"
DTYPE = "dtype-mismatch"  # SGLang would run draft and target in different dtypes
FC_WIDTH = "fc-width"  # target sends hidden states the fc cannot take
FUSED_HALF = "fused-half-missing"  # MLA: one of q_a_proj / kv_a_proj_with_mqa absent (never loaded)
MLA_INPUT = "mla-input-width"  # MLA q/kv down-projection takes 1xhidden, EAGLE-3 needs cat(embed, hidden)
MLA_DIMS = "mla-dims"  # MLA tensor disagrees with the config's lora/rope/head dims
DRAFT_CLASS = "draft-class-unsupported"  # the draft's class does not exist in this SGLang release
HEAD_DISCARDED = "lm-head-discarded"  # a trained lm_head SGLang replaces with the target's (draft_vocab_size null)
NOT_A_DRAFT = "not-an-eagle3-draft"  # the folder holds another kind of model (a target, ...)
SWAP_MISMATCH = "swap-mismatch"  # a new draft built otherwise than the served one (swap loads in place)
BLOCK_SIZE = "block-size"  # DFlash: no trained block size, two of them, or one that drafts nothing
MASK_TOKEN = "mask-token-id"  # DFlash: no trained mask token id, two of them, or one outside the vocabulary


@dataclasses.dataclass(frozen=True)
class Problem:
    code: str
    message: str
    key: str | None = None
    warning: bool = False  # reported, never fatal

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class DraftError(RuntimeError):
    """Base: carries the list of problems; `codes` for programs, str() for people."""

    def __init__(self, problems: list[Problem], header: str):
        self.problems = [p for p in problems if not p.warning]
        self.header = header
        super().__init__(self._render())

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    def _render(self) -> str:
        lines = [self.header] + [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class DraftLoadError(DraftError):
    """The draft checkpoint cannot be served correctly by this SGLang release."""


class DraftWidthError(DraftError):
    """The target feeds the draft hidden states whose width the draft's fc cannot take."""


class ConversionRefused(DraftError):
    """`convert` will not produce a checkpoint it cannot make faithful."""


def conversion_refused(msg: str, code: str = UNSUPPORTED_OPTION) -> ConversionRefused:
    """One reason `convert` refuses (raised by convert and by the layouts' readers of source formats)."""
    return ConversionRefused(
        [Problem(code, msg)], "convert: refusing to write a draft SGLang would not run as trained:"
    )


def class_missing(where: str, arch: str, draft: str, release, requires: str, since: str, lacks: str) -> list[Problem]:
    """[] when `release` has the capability `requires`; else why it would not build the draft its config names
    (`arch`, `draft`: what that is; `lacks`: what the release has none of, added in `since`)."""
    if release.has(requires):
        return []
    return [
        Problem(
            DRAFT_CLASS,
            f'{where}: architectures ["{arch}"] ({draft}) but SGLang {release.release} has no {lacks} (added in '
            f"{since}): it would not build this draft. Use SGLang >= {since}",
        )
    ]


def width_message(sent: int, need: int, k: int, target_hidden: int, where: str) -> str:
    if sent == target_hidden:
        cause = (
            "the target is not capturing aux hidden states: check --speculative-algorithm EAGLE3 (not EAGLE), "
            "the draft's eagle_config.use_aux_hidden_state (must be true), and that the target model class "
            "supports EAGLE-3 capture"
        )
    elif sent % target_hidden == 0:
        cause = (
            f"the target captures {sent // target_hidden} layers but the draft was trained on K={k}: "
            f"eagle_config.eagle_aux_hidden_state_layer_ids must list the {k} layers the draft was trained on"
        )
    else:
        cause = (
            f"{sent} is not a multiple of the draft's target_hidden_size={target_hidden}: the draft was "
            f"trained for a target of another hidden size"
        )
    return (
        f"EAGLE-3 draft ({where}): the target sends {sent}-wide hidden states but the draft's fc needs "
        f"{need} = K({k}) x target hidden({target_hidden}); SGLang would skip the fc and serve at accept "
        f"length ~1.00. Probable cause: {cause}."
    )
