"""What a draft's config.json implies: its DraftSpec (the shapes SGLang builds for it) and every config-level Problem.

Input is the plain config dict, so the offline check and the in-process loader reach the same verdict. What differs
between draft layouts (their fields, aux count, options) is asked of the layout's module (draft/arch).
"""

from __future__ import annotations

import dataclasses
import types

from . import arch as layouts
from . import errors as E
from .config_schema import CONVERT_HINT, eagle_config, norm_before_fc, type_problems
from .errors import Problem
from .keys import HF_INDICES_FIELD, Layout


@dataclasses.dataclass(frozen=True)
class DraftSpec:
    """The shapes a draft config implies for the SGLang class of its layout (draft/arch)."""

    hidden: int
    target_hidden: int
    k: int  # number of aux hidden states the fc takes
    aux_ids: tuple | None
    hf_indices: tuple | None
    n_layers: int
    n_heads: int
    n_kv: int
    head_dim: int
    inter: int
    vocab: int  # target vocabulary
    draft_vocab: int | None  # None: lm_head shared from the target
    tie: bool
    fc_bias: bool
    fc_norm: bool
    norm_before_fc: bool
    use_aux: bool
    arch: str  # the SGLang class that builds it (its layout's ARCH)
    layout: str  # its layout's registry name (draft/arch)
    dims: dict = dataclasses.field(default_factory=dict, hash=False)  # the layout's own dims (its config_fields)

    @property
    def layout_module(self) -> types.ModuleType:
        return layouts.get(self.layout)

    @property
    def embed_from_target(self) -> bool:
        return self.target_hidden == self.hidden

    @property
    def lm_head_rows(self) -> int:
        return self.vocab if self.draft_vocab is None else self.draft_vocab

    @property
    def needs_d2t(self) -> bool:
        return self.draft_vocab is not None and self.draft_vocab != self.vocab


def _class_list(labels: bool) -> str:
    """The classes SGLang builds drafts from, as messages list them: `["A"] or ["B"] (LABEL)`."""
    items = [f'["{m.ARCH}"]' + (f" ({m.LABEL})" if labels and m.LABEL else "") for m in layouts.modules()]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _not_a_draft(cfg: dict, archs: list, where: str) -> Problem:
    """One line for a folder whose config names no EAGLE-3 draft class: another format, or not a draft at all."""
    if "draft_vocab_size" in cfg or "eagle_config" in cfg or any("eagle" in a.lower() for a in archs):
        return Problem(
            E.CONFIG_INVALID,
            f"{where}: architectures is {archs}, SGLang picks an EAGLE-3 draft class "
            f"only for {_class_list(labels=True)} — {CONVERT_HINT}",
        )
    what = f"a {archs[0]} model" if archs else "a model config without architectures"
    return Problem(
        E.NOT_A_DRAFT,
        f"{where}: this is {what}, not an EAGLE-3 draft (SGLang builds drafts from "
        f"architectures {_class_list(labels=False)}); point at the draft's folder",
    )


def _class_problems(cfg: dict, where: str) -> tuple[types.ModuleType | None, list[Problem]]:
    """(the draft's layout module, problems that stop the rules: another format, wrong types, not a draft)."""
    if isinstance(cfg, dict) and (cfg.get("speculators_model_type") or "transformer_layer_config" in cfg):
        archs = cfg.get("architectures")
        return None, [
            Problem(
                E.CONFIG_INVALID,
                f"{where}: speculators-format config ({archs or 'no architectures'}); "
                f"SGLang does not read it (the layer sizes sit in transformer_layer_config) "
                f"— {CONVERT_HINT}",
            )
        ]
    if not isinstance(cfg, dict):
        return None, type_problems(cfg, where)
    arch = layouts.find(cfg)
    bad = type_problems(cfg, where, arch.CONFIG_FIELDS if arch else ())
    if bad:
        return arch, bad
    if arch is None:
        return None, [_not_a_draft(cfg, cfg.get("architectures") or [], where)]
    return arch, []


def _option_problems(cfg: dict, layout: Layout, arch, k: int, target_hidden: int, where: str) -> list[Problem]:
    """Training options SGLang cannot reproduce, or that this release would ignore."""
    P: list[Problem] = []
    ec = eagle_config(cfg)
    for holder, name in ((cfg, "config"), (ec, "eagle_config")):
        if holder.get("norm_before_residual"):
            P.append(
                Problem(
                    E.UNSUPPORTED_OPTION,
                    f"{where}: {name}.norm_before_residual=true — the draft was trained with "
                    f"a normed residual; SGLang always uses the un-normed residual, so it "
                    f"would run a different network. Retrain with norm_before_residual=false.",
                )
            )
    P += arch.option_problems(cfg, layout, where)
    if not ec.get("use_aux_hidden_state", True) and k != 1:
        from .errors import width_message

        P.append(
            Problem(
                E.FC_WIDTH,
                f"{where}: eagle_config.use_aux_hidden_state=false, so the target will not "
                f"capture aux states. " + width_message(target_hidden, k * target_hidden, k, target_hidden, "start-up"),
            )
        )
    mpe = cfg.get("max_position_embeddings")
    if isinstance(mpe, int) and mpe <= 4096 and not cfg.get("rope_scaling"):
        P.append(
            Problem(
                "short-context",
                f"{where}: max_position_embeddings={mpe}: SGLang clamps draft RoPE there and "
                f"acceptance collapses past {mpe} tokens; set it to the target's context length",
                warning=True,
            )
        )
    return P


def _config_problems(cfg: dict, layout: Layout, arch, where: str) -> tuple[dict | None, list | None, list | None, list]:
    """(the layout's dims or None when a missing field stops the rules, its layer ids, the HF indices they record,
    problems) of the config's fields."""
    P: list[Problem] = []
    missing_ints = [
        f
        for f in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size", "num_hidden_layers")
        if cfg.get(f) is None
    ]
    for field in missing_ints:
        P.append(Problem(E.CONFIG_MISSING, f"{where}: `{field}` missing or not an integer"))
    if "draft_vocab_size" not in cfg and arch.DRAFT_VOCAB_REQUIRED:
        P.append(
            Problem(
                E.CONFIG_MISSING,
                f"{where}: `draft_vocab_size` missing (SGLang's draft class fails "
                f"without it; null means 'share the target's lm_head')",
            )
        )
    ids, hf, ip = arch.layer_ids(cfg, where)
    P += ip
    dims, dp = arch.config_fields(cfg, layout, where)
    P += dp
    stop = missing_ints or any(p.code == E.CONFIG_MISSING for p in dp)
    return (None if stop else dims), ids, hf, P


def spec_from_config(cfg: dict, layout: Layout, where: str = "config.json") -> tuple[DraftSpec | None, list[Problem]]:
    """DraftSpec from a (SGLang-format) draft config, plus every config-level problem."""
    arch, stop = _class_problems(cfg, where)
    if stop:
        return None, stop
    dims, ids, hf, P = _config_problems(cfg, layout, arch, where)
    if dims is None:
        return None, P
    hidden, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    target_hidden = cfg.get("target_hidden_size") or hidden
    k, kp = arch.aux_count(cfg, ids, layout, where)
    P += kp
    if hf is not None and len(hf) != k:
        P.append(
            Problem(
                E.AUX_COUNT,
                f"{where}: eagle_config.{HF_INDICES_FIELD}={hf} names {len(hf)} target layers "
                f"but the draft takes K={k} aux states (fc width {k}x{target_hidden})",
            )
        )
    P += _option_problems(cfg, layout, arch, k, target_hidden, where)
    spec = DraftSpec(
        hidden=hidden,
        target_hidden=target_hidden,
        k=k,
        aux_ids=tuple(ids) if ids else None,
        hf_indices=tuple(hf) if hf is not None else None,
        n_layers=cfg["num_hidden_layers"],
        n_heads=n_heads,
        n_kv=cfg.get("num_key_value_heads") or n_heads,
        head_dim=cfg.get("head_dim") or hidden // n_heads,
        inter=cfg["intermediate_size"],
        vocab=cfg["vocab_size"],
        draft_vocab=cfg.get("draft_vocab_size"),
        tie=bool(cfg.get("tie_word_embeddings", False)),
        fc_bias=bool(cfg.get("bias", False)),
        fc_norm=bool(cfg.get("fc_norm") or cfg.get("use_aux_norm")),
        norm_before_fc=norm_before_fc(cfg),
        use_aux=bool(eagle_config(cfg).get("use_aux_hidden_state", True)),
        arch=arch.ARCH,
        layout=arch.NAME,
        dims=dims,
    )
    return spec, P
