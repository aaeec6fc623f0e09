"""The types a draft config.json must hold, checked before any rule reads it.

A config is outside input: a string where a width belongs, a flag spelled "false" (truthy), zero heads or
`architectures: 5` must become a Problem naming the file and the key, never a crash deeper in the rules.
"""

from __future__ import annotations

from .. import boundary as B
from . import errors as E
from .errors import Problem
from .keys import HF_INDICES_FIELD

# Present and non-null: a positive integer (a missing one is reported by the rules, with what SGLang does then).
POSITIVE = (
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "num_hidden_layers",
    "num_key_value_heads",
    "head_dim",
    "target_hidden_size",
    "num_aux_hidden_states",
    "draft_vocab_size",
    "max_position_embeddings",
)
FLAGS = (
    "tie_word_embeddings",
    "bias",
    "fc_norm",
    "use_aux_norm",
    "norm_before_fc",
    "norm_output",
    "norm_before_residual",
)
EAGLE_FLAGS = ("use_aux_hidden_state", "norm_before_fc", "norm_before_residual")
STRINGS = ("torch_dtype", "dtype", "model_type")
AUX_IDS = "eagle_aux_hidden_state_layer_ids"
CONVERT_HINT = "convert it: python -m sglang_eagle3_ext.convert SRC DST"


def _collect(problems: list[Problem], fn, *args, **kw) -> None:
    try:
        fn(*args, **kw)
    except B.BadInput as e:
        problems.append(Problem(E.CONFIG_INVALID, str(e)))


def _index_list(value, where: str) -> None:
    B.list_of(value, int, where, minimum=0)
    if not value:
        raise B.BadInput(where, "must list at least one layer")


def _eagle_config(ec: dict, where: str, problems: list[Problem], hf_field: str) -> None:
    for f in EAGLE_FLAGS:
        _collect(problems, B.field, ec, f, bool, where, optional=True)
    for f in (AUX_IDS, hf_field):
        if ec.get(f) is not None:
            _collect(problems, _index_list, ec[f], f"{where}: {f!r}")


def eagle_config(cfg: dict) -> dict:
    ec = cfg.get("eagle_config")
    return ec if isinstance(ec, dict) else {}


def eagle_layer_ids(cfg: dict, where: str) -> tuple[list | None, list | None, list[Problem]]:
    """An EAGLE-3 layout's layer_ids: (eagle_config's aux layer ids, the HF indices it records, problems)."""
    ec = eagle_config(cfg)
    ids, hf = ec.get(AUX_IDS), ec.get(HF_INDICES_FIELD)
    if ids is not None:
        return ids, hf, []
    return (
        None,
        hf,
        [
            Problem(
                E.CONFIG_MISSING,
                f"{where}: `eagle_config.{AUX_IDS}` missing: SGLang would silently capture its default target "
                f"layers, not the ones the draft was trained on — add them (and `{HF_INDICES_FIELD}`), or "
                f"{CONVERT_HINT}",
            )
        ],
    )


def norm_before_fc(cfg: dict) -> bool:
    """Trained with an input_norm over the fc's input (speculators' norm_before_fc; eagle_config's wins)."""
    return bool(eagle_config(cfg).get("norm_before_fc", cfg.get("norm_before_fc", False)))


def type_problems(cfg, where: str, fields: tuple[str, ...] = ()) -> list[Problem]:
    """Every key whose value has the wrong type or range; [] when the config can be read by the rules.
    fields: the draft layout's own positive-integer fields (its CONFIG_FIELDS)."""

    if not isinstance(cfg, dict):
        return [
            Problem(
                E.CONFIG_INVALID,
                f"{where}: expected a JSON object (mapping) at the top level, got {type(cfg).__name__}",
            )
        ]
    P: list[Problem] = []
    if cfg.get("architectures") is not None:
        _collect(P, B.list_of, cfg["architectures"], str, f"{where}: 'architectures'")
    for f in POSITIVE + tuple(fields):
        _collect(P, B.field, cfg, f, int, where, optional=True, minimum=1)
    for f in FLAGS:
        _collect(P, B.field, cfg, f, bool, where, optional=True)
    for f in STRINGS:
        _collect(P, B.field, cfg, f, str, where, optional=True)
    if cfg.get(AUX_IDS) is not None:
        _collect(P, _index_list, cfg[AUX_IDS], f"{where}: {AUX_IDS!r}")
    if cfg.get("eagle_config") is not None:
        _collect(P, B.field, cfg, "eagle_config", dict, where)
        if isinstance(cfg["eagle_config"], dict):
            _eagle_config(cfg["eagle_config"], f"{where}: eagle_config", P, HF_INDICES_FIELD)
    return P
