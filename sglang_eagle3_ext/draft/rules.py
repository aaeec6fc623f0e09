"""The rules a draft must satisfy to be served correctly, shared by `check` and the loader.

Input is plain data (config dict, tensor names/shapes/values), so the offline check and the
in-process loader produce the same Problems with the same codes. What differs between draft layouts
(their fields, layer shapes, release key names, fused parameters) is asked of the layout's module (draft/arch).
"""

from __future__ import annotations

import dataclasses
import types

from . import arch as layouts
from . import errors as E
from .config_schema import eagle_config, norm_before_fc, type_problems
from .errors import Problem
from .keys import HF_INDICES_FIELD, LAYER, Layout, ignored_reason
from .target import declared_dtype, serving_dtype, target_problems  # noqa: F401 - part of the rules' interface

CONVERT_HINT = "convert it: python -m sglang_eagle3_ext.convert SRC DST"


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
                f"SGLang does not read it and would fall back to a wrong model class "
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


def _aux_ids(cfg: dict, where: str) -> tuple[list | None, list[Problem]]:
    ids = eagle_config(cfg).get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        return ids, []
    return None, [
        Problem(
            E.CONFIG_MISSING,
            f"{where}: `eagle_config.eagle_aux_hidden_state_layer_ids` missing: SGLang "
            f"would silently capture its default target layers, not the ones the draft "
            f"was trained on — add them (and `{HF_INDICES_FIELD}`), or {CONVERT_HINT}",
        )
    ]


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
        from .guard import width_message

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


def _config_problems(cfg: dict, layout: Layout, arch, where: str) -> tuple[dict | None, list | None, list[Problem]]:
    """(the layout's dims or None when a missing field stops the rules, aux ids, problems) of the config's fields."""
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
    ids, ip = _aux_ids(cfg, where)
    P += ip
    dims, dp = arch.config_fields(cfg, layout, where)
    P += dp
    stop = missing_ints or any(p.code == E.CONFIG_MISSING for p in dp)
    return (None if stop else dims), ids, P


def spec_from_config(cfg: dict, layout: Layout, where: str = "config.json") -> tuple[DraftSpec | None, list[Problem]]:
    """DraftSpec from a (SGLang-format) draft config, plus every config-level problem."""
    arch, stop = _class_problems(cfg, where)
    if stop:
        return None, stop
    dims, ids, P = _config_problems(cfg, layout, arch, where)
    if dims is None:
        return None, P
    hidden, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    target_hidden = cfg.get("target_hidden_size") or hidden
    k, kp = arch.aux_count(cfg, ids, layout, where)
    P += kp
    hf = eagle_config(cfg).get(HF_INDICES_FIELD)
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


def expected_shapes(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Canonical key -> shape of every tensor SGLang can take from a checkpoint for this draft."""
    H, Ht = spec.hidden, spec.target_hidden
    shapes = {
        "fc.weight": (H, spec.k * Ht),
        "norm.weight": (H,),
        "embed_tokens.weight": (spec.vocab, H),
        "d2t": (spec.lm_head_rows,),
        "t2d": (spec.vocab,),
    }
    if not spec.tie:
        shapes["lm_head.weight"] = (spec.lm_head_rows, H)
    if spec.fc_bias:
        shapes["fc.bias"] = (H,)
    if spec.fc_norm:
        shapes.update({f"fc_norm.{i}.weight": (Ht,) for i in range(spec.k)})
    if spec.norm_before_fc:
        shapes["input_norm.weight"] = (spec.k * Ht,)
    shapes.update(spec.layout_module.layer_shapes(spec))
    return shapes


def partial_fused(spec: DraftSpec, present) -> tuple[str, str] | None:
    """(a missing key, a present one) of a parameter the release fuses from several keys of which only some
    are there: the release then never fills it, without a word."""
    for parts in spec.layout_module.FUSED.values():
        have = [p for p in parts if p in present]
        if have and len(have) < len(parts):
            return next(p for p in parts if p not in present), have[0]
    return None


def required_keys(spec: DraftSpec) -> set[str]:
    """Canonical keys that must come from the checkpoint (trained values)."""
    req = set(expected_shapes(spec)) - {"t2d", "embed_tokens.weight", "d2t"}
    req -= {
        k for k in req if LAYER.match(k) and not k.startswith("layers.0.") and k.endswith(".input_layernorm.weight")
    }
    if not spec.embed_from_target:
        req.add("embed_tokens.weight")
    if spec.draft_vocab is None:
        req.discard("lm_head.weight")  # SGLang takes it from the target
    if spec.needs_d2t:
        req.add("d2t")
    return req


def likely_cause(canon: str, spec: DraftSpec) -> str:
    m = LAYER.match(canon)
    if m and int(m.group(1)) >= spec.n_layers:
        return f"the checkpoint has layer {m.group(1)} but config num_hidden_layers={spec.n_layers}"
    if canon.endswith(".bias"):
        return "trained with a bias SGLang's draft does not have"
    if "q_norm" in canon or "k_norm" in canon:
        return "trained with qk-norm (Qwen3-style layers), which SGLang's Llama EAGLE-3 draft lacks"
    return "a name from another format or model; SGLang would drop it silently"


def tensor_problems(canon: str, shape: tuple, spec: DraftSpec, shapes: dict, where: str) -> list[Problem]:
    """Name/shape problems of one checkpoint tensor (canonical name)."""
    if ignored_reason(canon, spec.embed_from_target) is not None and canon != "t2d":
        return []
    arch = spec.layout_module
    if canon in arch.FUSED:
        return [arch.prefused_problem(canon, where)]
    if canon not in shapes:
        return [
            Problem(
                E.UNEXPECTED_WEIGHT,
                f"{where}: unexpected tensor {canon} {list(shape)} — {likely_cause(canon, spec)}",
                key=canon,
            )
        ]
    want = shapes[canon]
    if tuple(shape) == want:
        return []
    Ht, k = spec.target_hidden, spec.k
    if canon == "fc.weight" and len(shape) == 2 and shape[0] == spec.hidden and shape[1] % Ht == 0:
        got_k = shape[1] // Ht
        if got_k == 1 and k != 1:
            return [
                Problem(
                    E.FC_UNFUSED,
                    f"{where}: fc.weight is {list(shape)} = 1x{Ht}: it takes a single target layer, "
                    f"but an EAGLE-3 draft fuses K={k} aux states ({list(want)}). This is not an "
                    f"EAGLE-3 fc (EAGLE-1/2 draft, or a wrong export).",
                    key=canon,
                )
            ]
        return [
            Problem(
                E.AUX_COUNT,
                f"{where}: fc.weight is {list(shape)} = {got_k}x{Ht} (trained on {got_k} aux "
                f"layers) but the config gives K={k} (eagle_aux_hidden_state_layer_ids="
                f"{list(spec.aux_ids) if spec.aux_ids else None}); fix the ids to the {got_k} layers "
                f"the draft was trained on",
                key=canon,
            )
        ]
    if (p := arch.tensor_problem(canon, tuple(shape), want, spec, where)) is not None:
        return [p]
    if canon == "d2t":
        return [
            Problem(
                E.D2T_LENGTH,
                f"{where}: d2t has {list(shape)} entries but draft_vocab_size="
                f"{spec.lm_head_rows} (lm_head rows); d2t must map every draft token",
                key=canon,
            )
        ]
    return [
        Problem(
            E.SHAPE,
            f"{where}: {canon} is {list(shape)}, expected {list(want)} from config "
            f"(hidden {spec.hidden}, target hidden {Ht}, K={k}, "
            f"heads {spec.n_heads}/{spec.n_kv}x{spec.head_dim})",
            key=canon,
        )
    ]


def missing_problems(present: set[str], spec: DraftSpec, where: str) -> list[Problem]:
    out = []
    missing = required_keys(spec) - present
    half = partial_fused(spec, present)
    if half and half[0] in missing:
        out.append(spec.layout_module.half_missing_problem(half[0], half[1], where))
        missing.discard(half[0])
    for k in sorted(missing):
        why = (
            " (draft_vocab_size != vocab_size: without it draft token ids are read as target ids)" if k == "d2t" else ""
        )
        if k == HEAD:
            why = (
                f" (draft_vocab_size={spec.draft_vocab} is set, so SGLang does not take the target's lm_head: the "
                f"draft would predict from an uninitialised head and serve at accept length ~1.00; add the trained "
                f"lm_head, or set draft_vocab_size null only if the draft was trained with the target's head)"
            )
        out.append(
            Problem(E.MISSING_WEIGHT, f"{where}: {k} missing — the draft would run with untrained values{why}", key=k)
        )
    if head_from_target(spec) and HEAD not in present and spec.target_hidden != spec.hidden:
        out.append(
            Problem(
                E.CONFIG_INVALID,
                f"{where}: draft_vocab_size null makes SGLang give the draft the target's "
                f"lm_head and embeddings, which are target_hidden_size={spec.target_hidden} "
                f"wide, but the draft's hidden_size is {spec.hidden}: the first request "
                f"would fail. Fix: train the draft's own lm_head and set draft_vocab_size to "
                f"vocab_size ({spec.vocab})",
            )
        )
    return out


# --- a trained lm_head that SGLang would replace with the target's ---------------------------------------
HEAD = "lm_head.weight"


def head_from_target(spec: DraftSpec) -> bool:
    """SGLang's draft classes (every layout) set load_lm_head_from_target when draft_vocab_size is null and the
    head is untied; the EAGLE worker's init_lm_head then installs the target's lm_head and embeddings
    (set_embed_and_head), replacing whatever the checkpoint gave."""
    return spec.draft_vocab is None and not spec.tie


def trained_head(
    spec: DraftSpec, shape: tuple, where: str, same: bool | None, about: str
) -> tuple[str | None, Problem | None]:
    """Verdict on a checkpoint lm_head under head_from_target: (reason to ignore it, None) when it equals the
    target's head, else (None, a refusal naming the fix). same/about: the comparison with the target's head
    and where that head was read (or why it could not be)."""
    if same:
        return f"equals the target's lm_head ({about}), which SGLang uses (draft_vocab_size null)", None
    detail = (
        f"it differs from the target's ({about})"
        if same is False
        else f"whether it equals the target's head cannot be told: {about}"
    )
    return None, Problem(
        E.HEAD_DISCARDED,
        f"{where}: {HEAD} {list(shape)} is in the checkpoint but config.json has "
        f"draft_vocab_size null (untied): SGLang loads it, then replaces it with the "
        f"target's lm_head at start-up (load_lm_head_from_target), so the trained head "
        f'would be thrown away; {detail}. Fix: set "draft_vocab_size": {spec.vocab} '
        f"(= vocab_size) in config.json so SGLang keeps it (python -m "
        f"sglang_eagle3_ext.convert SRC DST does this), or delete {HEAD} if the draft "
        f"was trained with the target's head",
        key=HEAD,
    )


def keep_trained_head(cfg: dict, spec: DraftSpec) -> str:
    """convert's fix for trained_head: draft_vocab_size = vocab_size, so SGLang loads and keeps the checkpoint's
    head (exactly the network trained; a head equal to the target's only costs its memory). Returns the reason."""
    cfg["draft_vocab_size"] = spec.vocab
    return (
        f"draft_vocab_size was null but the checkpoint holds a trained {HEAD} [{spec.vocab}, {spec.hidden}]: "
        f"recorded draft_vocab_size={spec.vocab} so SGLang keeps it (null makes SGLang replace it with the "
        f"target's lm_head at start-up)"
    )


def d2t_dtype_problem(dtype: str, where: str) -> Problem:
    return Problem(
        E.D2T_RANGE,
        f"{where}: d2t is {dtype}; it must hold integer offsets (target_id - draft_id): "
        f"SGLang adds them to arange() and indexes the vocabulary with the result",
        key="d2t",
    )


def d2t_problems(d2t, spec: DraftSpec, where: str) -> list[Problem]:
    """d2t[i] = target_id - i; every target id must lie in [0, vocab). d2t: an array or a CPU tensor."""
    import numpy as np

    if hasattr(d2t, "is_floating_point") and (d2t.is_floating_point() or d2t.is_complex()):
        return [d2t_dtype_problem(str(d2t.dtype), where)]  # numpy has no bfloat16
    d = np.asarray(d2t)
    if d.dtype.kind not in "iu":
        return [d2t_dtype_problem(str(d.dtype), where)]
    d = d.astype(np.int64).reshape(-1)
    ids = d + np.arange(d.shape[0])
    bad = np.nonzero((ids < 0) | (ids >= spec.vocab))[0]
    if bad.size == 0:
        return []
    i = int(bad[0])
    return [
        Problem(
            E.D2T_RANGE,
            f"{where}: d2t maps {bad.size} draft tokens outside the target vocabulary "
            f"[0, {spec.vocab}), e.g. draft token {i} -> {int(ids[i])}; d2t holds offsets "
            f"(target_id - draft_id), not target ids, and must come from the target's tokenizer",
            key="d2t",
        )
    ]


def non_finite_problem(canon: str, n_bad: int, numel: int, where: str) -> Problem:
    return Problem(
        E.NON_FINITE,
        f"{where}: {canon} has {n_bad} NaN/Inf values of {numel} — the draft was saved "
        f"before these weights were trained/loaded (speculators initialises lm_head/embeddings "
        f"to NaN until the verifier's are loaded)",
        key=canon,
    )
