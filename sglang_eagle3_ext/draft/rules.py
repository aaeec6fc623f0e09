"""The rules a draft must satisfy to be served correctly, shared by `check` and the loader.

Input is plain data (config dict, tensor names/shapes/values), so the offline check and the
in-process loader produce the same Problems with the same codes.
"""
from __future__ import annotations

import dataclasses
import re

from . import errors as E
from . import mla
from .errors import Problem
from ..sglang_runtime import language_config
from .keys import HF_INDICES_FIELD, Layout, ignored_reason

ARCH = "LlamaForCausalLMEagle3"
_LAYER = re.compile(r"^layers\.(\d+)\.(.*)$")
CONVERT_HINT = "convert it: python -m sglang_eagle3_ext.convert SRC DST"


@dataclasses.dataclass(frozen=True)
class DraftSpec:
    """The shapes a draft config implies for SGLang's LlamaForCausalLMEagle3."""
    hidden: int
    target_hidden: int
    k: int                      # number of aux hidden states the fc takes
    aux_ids: tuple | None
    hf_indices: tuple | None
    n_layers: int
    n_heads: int
    n_kv: int
    head_dim: int
    inter: int
    vocab: int                  # target vocabulary
    draft_vocab: int | None     # None: lm_head shared from the target
    tie: bool
    fc_bias: bool
    fc_norm: bool
    norm_before_fc: bool
    use_aux: bool
    arch: str = ARCH            # which SGLang class builds it: ARCH or mla.ARCH
    q_lora: int = 0             # MLA dims (mla.ARCH only)
    kv_lora: int = 0
    rope: int = 0
    nope: int = 0
    v_head: int = 0

    @property
    def mla(self) -> bool:
        return self.arch == mla.ARCH

    @property
    def embed_from_target(self) -> bool:
        return self.target_hidden == self.hidden

    @property
    def lm_head_rows(self) -> int:
        return self.vocab if self.draft_vocab is None else self.draft_vocab

    @property
    def needs_d2t(self) -> bool:
        return self.draft_vocab is not None and self.draft_vocab != self.vocab


def _eagle_cfg(cfg: dict) -> dict:
    ec = cfg.get("eagle_config")
    return ec if isinstance(ec, dict) else {}


def spec_from_config(cfg: dict, layout: Layout, where: str = "config.json") -> tuple[DraftSpec | None, list[Problem]]:
    """DraftSpec from a (SGLang-format) draft config, plus every config-level problem."""
    P: list[Problem] = []
    archs = cfg.get("architectures") or []
    if cfg.get("speculators_model_type") or "transformer_layer_config" in cfg:
        return None, [Problem(E.CONFIG_INVALID, f"{where}: speculators-format config ({archs or 'no architectures'}); "
                                                f"SGLang does not read it and would fall back to a wrong model class — {CONVERT_HINT}")]
    is_mla = mla.ARCH in archs
    if ARCH not in archs and not is_mla:
        P.append(Problem(E.CONFIG_INVALID, f"{where}: architectures is {archs}, SGLang picks an EAGLE-3 draft class "
                                           f"only for [\"{ARCH}\"] or [\"{mla.ARCH}\"] (MLA) — {CONVERT_HINT}"))
    missing_ints = [f for f in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                                "num_hidden_layers") if not isinstance(cfg.get(f), int)]
    for field in missing_ints:
        P.append(Problem(E.CONFIG_MISSING, f"{where}: `{field}` missing or not an integer"))
    if "draft_vocab_size" not in cfg and not is_mla:  # the MLA class reads a missing one as null
        P.append(Problem(E.CONFIG_MISSING, f"{where}: `draft_vocab_size` missing (SGLang's draft class fails "
                                           f"without it; null means 'share the target's lm_head')"))
    ec = _eagle_cfg(cfg)
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        P.append(Problem(E.CONFIG_MISSING, f"{where}: `eagle_config.eagle_aux_hidden_state_layer_ids` missing: SGLang "
                                           f"would silently capture its default target layers, not the ones the draft "
                                           f"was trained on — add them (and `{HF_INDICES_FIELD}`), or {CONVERT_HINT}"))
    elif not (isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids)):
        P.append(Problem(E.CONFIG_INVALID, f"{where}: eagle_aux_hidden_state_layer_ids must be a non-empty list of ints, got {ids!r}"))
        ids = None
    for holder, name in ((cfg, "config"), (ec, "eagle_config")):
        if holder.get("norm_before_residual"):
            P.append(Problem(E.UNSUPPORTED_OPTION, f"{where}: {name}.norm_before_residual=true — the draft was trained with "
                                                   f"a normed residual; SGLang always uses the un-normed residual, so it "
                                                   f"would run a different network. Retrain with norm_before_residual=false."))
    mla_fields = {}
    if is_mla:
        mla_fields, mp = mla.config_fields(cfg, layout, where)
        P += mp
        if any(p.code == E.CONFIG_MISSING for p in mp):
            return None, P
    if missing_ints:
        return None, P
    hidden = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    target_hidden = cfg.get("target_hidden_size") or hidden
    k = cfg.get("num_aux_hidden_states") or (len(ids) if ids else 3)
    if is_mla:
        k = mla.release_k(cfg)
        if cfg.get("num_aux_hidden_states") and cfg["num_aux_hidden_states"] != k:
            P.append(Problem(E.AUX_COUNT, f"{where}: num_aux_hidden_states={cfg['num_aux_hidden_states']} but SGLang's "
                                          f"{mla.ARCH} ignores it and builds fc for K={k} (the number of "
                                          f"eagle_aux_hidden_state_layer_ids)"))
    elif layout.midlayer:
        k = 3  # <=0.5.10 builds Linear(3*hidden_in, hidden) whatever the config says
        if ids and len(ids) != 3:
            P.append(Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: {len(ids)} aux layers, but SGLang {layout.release} "
                                                       f"only supports 3; use SGLang >= 0.5.14"))
        if cfg["num_hidden_layers"] != 1:
            P.append(Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: num_hidden_layers={cfg['num_hidden_layers']}, SGLang "
                                                       f"{layout.release} supports exactly 1 draft layer"))
    elif ids and cfg.get("num_aux_hidden_states") and cfg["num_aux_hidden_states"] != len(ids):
        P.append(Problem(E.AUX_COUNT, f"{where}: num_aux_hidden_states={cfg['num_aux_hidden_states']} but "
                                      f"eagle_aux_hidden_state_layer_ids has {len(ids)} entries {ids}"))
    hf = ec.get(HF_INDICES_FIELD)
    if hf is not None:
        if not (isinstance(hf, list) and all(isinstance(i, int) and i >= 0 for i in hf)):
            P.append(Problem(E.CONFIG_INVALID, f"{where}: eagle_config.{HF_INDICES_FIELD} must be a list of ints >= 0, got {hf!r}"))
            hf = None
        elif len(hf) != k:
            P.append(Problem(E.AUX_COUNT, f"{where}: eagle_config.{HF_INDICES_FIELD}={hf} names {len(hf)} target layers "
                                          f"but the draft takes K={k} aux states (fc width {k}x{target_hidden})"))
    fc_norm = bool(cfg.get("fc_norm") or cfg.get("use_aux_norm"))
    norm_before_fc = bool(ec.get("norm_before_fc", cfg.get("norm_before_fc", False)))
    if fc_norm and not layout.fc_norm and not is_mla:
        P.append(Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: fc_norm=true but SGLang {layout.release} has no fc_norm "
                                                   f"(it would be ignored); use SGLang >= 0.5.14"))
    if norm_before_fc and not layout.input_norm and not is_mla:  # mla.config_fields refuses it
        P.append(Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: norm_before_fc=true but SGLang {layout.release} has no "
                                                   f"input_norm (it would be ignored); use SGLang >= 0.5.18"))
    if cfg.get("norm_output") and not layout.norm_output and not is_mla:
        P.append(Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: norm_output=true but SGLang {layout.release} ignores it"))
    use_aux = bool(ec.get("use_aux_hidden_state", True))
    if not use_aux and k != 1:
        from .guard import width_message
        P.append(Problem(E.FC_WIDTH, f"{where}: eagle_config.use_aux_hidden_state=false, so the target will not "
                                     f"capture aux states. " + width_message(target_hidden, k * target_hidden, k, target_hidden, "start-up")))
    dvs = cfg.get("draft_vocab_size")
    spec = DraftSpec(hidden=hidden, target_hidden=target_hidden, k=k, aux_ids=tuple(ids) if ids else None,
                     hf_indices=tuple(hf) if hf is not None else None, n_layers=cfg["num_hidden_layers"],
                     n_heads=n_heads, n_kv=cfg.get("num_key_value_heads") or n_heads,
                     head_dim=cfg.get("head_dim") or hidden // n_heads, inter=cfg["intermediate_size"],
                     vocab=cfg["vocab_size"], draft_vocab=dvs, tie=bool(cfg.get("tie_word_embeddings", False)),
                     fc_bias=bool(cfg.get("bias", False)), fc_norm=fc_norm, norm_before_fc=norm_before_fc, use_aux=use_aux,
                     arch=mla.ARCH if is_mla else ARCH, **mla_fields)
    mpe = cfg.get("max_position_embeddings")
    if isinstance(mpe, int) and mpe <= 4096 and not cfg.get("rope_scaling"):
        P.append(Problem("short-context", f"{where}: max_position_embeddings={mpe}: SGLang clamps draft RoPE there and "
                                          f"acceptance collapses past {mpe} tokens; set it to the target's context length",
                         warning=True))
    return spec, P


def expected_shapes(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Canonical key -> shape of every tensor SGLang can take from a checkpoint for this draft."""
    H, Ht, hd = spec.hidden, spec.target_hidden, spec.head_dim
    q, kv = spec.n_heads * hd, spec.n_kv * hd
    shapes = {"fc.weight": (H, spec.k * Ht), "norm.weight": (H,), "embed_tokens.weight": (spec.vocab, H),
              "d2t": (spec.lm_head_rows,), "t2d": (spec.vocab,)}
    if not spec.tie:
        shapes["lm_head.weight"] = (spec.lm_head_rows, H)
    if spec.fc_bias:
        shapes["fc.bias"] = (H,)
    if spec.fc_norm:
        shapes.update({f"fc_norm.{i}.weight": (Ht,) for i in range(spec.k)})
    if spec.norm_before_fc:
        shapes["input_norm.weight"] = (spec.k * Ht,)
    if spec.mla:
        shapes.update(mla.layer_shapes(spec))
        return shapes
    for n in range(spec.n_layers):
        w = 2 * H if n == 0 else H  # the first layer takes cat(embeds, hidden)
        p = f"layers.{n}."
        shapes.update({p + "self_attn.q_proj.weight": (q, w), p + "self_attn.k_proj.weight": (kv, w),
                       p + "self_attn.v_proj.weight": (kv, w), p + "self_attn.o_proj.weight": (H, q),
                       p + "mlp.gate_proj.weight": (spec.inter, H), p + "mlp.up_proj.weight": (spec.inter, H),
                       p + "mlp.down_proj.weight": (H, spec.inter), p + "input_layernorm.weight": (H,),
                       p + "hidden_norm.weight": (H,), p + "post_attention_layernorm.weight": (H,)})
    return shapes


def required_keys(spec: DraftSpec) -> set[str]:
    """Canonical keys that must come from the checkpoint (trained values)."""
    req = set(expected_shapes(spec)) - {"t2d", "embed_tokens.weight", "d2t"}
    req -= {k for k in req if _LAYER.match(k) and not k.startswith("layers.0.") and k.endswith(".input_layernorm.weight")}
    if not spec.embed_from_target:
        req.add("embed_tokens.weight")
    if spec.draft_vocab is None:
        req.discard("lm_head.weight")  # SGLang takes it from the target
    if spec.needs_d2t:
        req.add("d2t")
    return req


def _likely_cause(canon: str, spec: DraftSpec) -> str:
    m = _LAYER.match(canon)
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
    if spec.mla and canon == mla.FUSED:
        return [mla.fused_key_problem(where)]
    if canon not in shapes:
        return [Problem(E.UNEXPECTED_WEIGHT, f"{where}: unexpected tensor {canon} {list(shape)} — {_likely_cause(canon, spec)}",
                        key=canon)]
    want = shapes[canon]
    if tuple(shape) == want:
        return []
    Ht, k = spec.target_hidden, spec.k
    if canon == "fc.weight" and len(shape) == 2 and shape[0] == spec.hidden and shape[1] % Ht == 0:
        got_k = shape[1] // Ht
        if got_k == 1 and k != 1:
            return [Problem(E.FC_UNFUSED, f"{where}: fc.weight is {list(shape)} = 1x{Ht}: it takes a single target layer, "
                                          f"but an EAGLE-3 draft fuses K={k} aux states ({list(want)}). This is not an "
                                          f"EAGLE-3 fc (EAGLE-1/2 draft, or a wrong export).", key=canon)]
        return [Problem(E.AUX_COUNT, f"{where}: fc.weight is {list(shape)} = {got_k}x{Ht} (trained on {got_k} aux "
                                     f"layers) but the config gives K={k} (eagle_aux_hidden_state_layer_ids="
                                     f"{list(spec.aux_ids) if spec.aux_ids else None}); fix the ids to the {got_k} layers "
                                     f"the draft was trained on", key=canon)]
    if spec.mla and (p := mla.tensor_problem(canon, tuple(shape), want, spec, where)) is not None:
        return [p]
    if canon == "d2t":
        return [Problem(E.D2T_LENGTH, f"{where}: d2t has {list(shape)} entries but draft_vocab_size="
                                      f"{spec.lm_head_rows} (lm_head rows); d2t must map every draft token", key=canon)]
    return [Problem(E.SHAPE, f"{where}: {canon} is {list(shape)}, expected {list(want)} from config "
                             f"(hidden {spec.hidden}, target hidden {Ht}, K={k}, heads {spec.n_heads}/{spec.n_kv}x{spec.head_dim})",
                    key=canon)]


def missing_problems(present: set[str], spec: DraftSpec, where: str) -> list[Problem]:
    out = []
    missing = required_keys(spec) - present
    half = mla.fused_halves(present) if spec.mla else None
    if half and half[0] in missing:
        out.append(mla.half_missing_problem(half[0], half[1], where))
        missing.discard(half[0])
    for k in sorted(missing):
        why = " (draft_vocab_size != vocab_size: without it draft token ids are read as target ids)" if k == "d2t" else ""
        if k == "lm_head.weight":
            why = (f" (draft_vocab_size={spec.draft_vocab} is set, so SGLang does not take the target's lm_head: the "
                   f"draft would predict from an uninitialised head and serve at accept length ~1.00; add the trained "
                   f"lm_head, or set draft_vocab_size null only if the draft was trained with the target's head)")
        out.append(Problem(E.MISSING_WEIGHT, f"{where}: {k} missing — the draft would run with untrained values{why}", key=k))
    return out


def d2t_problems(d2t, spec: DraftSpec, where: str) -> list[Problem]:
    """d2t[i] = target_id - i; every target id must lie in [0, vocab)."""
    import numpy as np

    d = np.asarray(d2t).astype(np.int64).reshape(-1)
    ids = d + np.arange(d.shape[0])
    bad = np.nonzero((ids < 0) | (ids >= spec.vocab))[0]
    if bad.size == 0:
        return []
    i = int(bad[0])
    return [Problem(E.D2T_RANGE, f"{where}: d2t maps {bad.size} draft tokens outside the target vocabulary "
                                 f"[0, {spec.vocab}), e.g. draft token {i} -> {int(ids[i])}; d2t holds offsets "
                                 f"(target_id - draft_id), not target ids, and must come from the target's tokenizer",
                    key="d2t")]


def non_finite_problem(canon: str, n_bad: int, numel: int, where: str) -> Problem:
    return Problem(E.NON_FINITE, f"{where}: {canon} has {n_bad} NaN/Inf values of {numel} — the draft was saved "
                                 f"before these weights were trained/loaded (speculators initialises lm_head/embeddings "
                                 f"to NaN until the verifier's are loaded)", key=canon)


def declared_dtype(*cfgs: dict) -> str | None:
    """The first torch_dtype/dtype that these configs declare, in order; None if none does."""
    return next((c.get(k) for c in cfgs for k in ("torch_dtype", "dtype") if c.get(k)), None)


def serving_dtype(declared: str | None) -> str:
    """The dtype SGLang's `--dtype auto` gives a model whose config declares `declared`:
    float32 (or none) becomes float16."""
    d = str(declared or "float32").replace("torch.", "")
    return "float16" if d == "float32" else d


def target_problems(spec: DraftSpec, target_cfg: dict, where: str, draft_cfg: dict | None = None) -> list[Problem]:
    """Draft vs target model config (hidden, vocab, layer indices, serving dtype)."""
    t = language_config(target_cfg)
    # a wrapper's text_config often leaves the dtype to the top level; declared nowhere: not judged here
    t_declared = declared_dtype(t, target_cfg)
    t_dtype = serving_dtype(t_declared)
    d_declared = declared_dtype(draft_cfg) if draft_cfg is not None else None
    P = []
    if draft_cfg is not None and t_declared and serving_dtype(d_declared) != t_dtype:
        P.append(Problem(E.DTYPE, f"{where}: SGLang would run the draft in {serving_dtype(d_declared)} (config "
                                  f"torch_dtype={d_declared!r}; auto maps "
                                  f"float32/none to float16) but the target in {t_dtype}: the first "
                                  f"request fails with 'expected mat1 and mat2 to have the same dtype'. Fix: set "
                                  f"torch_dtype to {t_dtype!r} in the draft config (`convert` writes the "
                                  f"weights' dtype), or serve with an explicit --dtype"))
    th, tv, tn = t.get("hidden_size"), t.get("vocab_size"), t.get("num_hidden_layers")
    if isinstance(th, int) and th != spec.target_hidden:
        P.append(Problem(E.TARGET_MISMATCH, f"{where}: draft expects target hidden size {spec.target_hidden} "
                                            f"(target_hidden_size/hidden_size) but the target has hidden_size={th}: "
                                            f"this draft was trained for another model"))
    if isinstance(tv, int) and tv != spec.vocab:
        P.append(Problem(E.TARGET_MISMATCH, f"{where}: draft vocab_size={spec.vocab} but the target has vocab_size={tv}"))
    if isinstance(tn, int) and spec.hf_indices:
        bad = [i for i in spec.hf_indices if not 0 <= i < tn]
        if bad:
            P.append(Problem(E.LAYER_INDEX, f"{where}: {HF_INDICES_FIELD}={list(spec.hf_indices)} but the target has "
                                            f"{tn} layers; SGLang can capture HF hidden_states[0..{tn - 1}]"))
    return P
