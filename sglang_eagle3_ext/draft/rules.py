"""The rules a draft must satisfy to be served correctly, shared by `check` and the loader.

Input is plain data (config dict, tensor names/shapes/values), so the offline check and the
in-process loader produce the same Problems with the same codes. The config's rules (DraftSpec, spec_from_config)
live in config_rules and are importable from here; this module holds the checkpoint's: shapes, required and
unexpected tensors, the lm_head SGLang would replace, d2t and value checks. What differs between draft layouts
(their layer shapes, release key names, fused parameters) is asked of the layout's module (draft/arch).
"""

from __future__ import annotations

from . import errors as E
from .config_rules import CONVERT_HINT, DraftSpec, spec_from_config  # noqa: F401 - part of the rules' interface
from .errors import Problem
from .keys import LAYER, ignored_reason
from .target import captured_problems, declared_dtype, serving_dtype, target_problems  # noqa: F401


def expected_shapes(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Canonical key -> shape of every tensor SGLang can take from a checkpoint for this draft."""
    H, Ht = spec.hidden, spec.target_hidden
    shapes = {"fc.weight": (H, spec.k * Ht), "norm.weight": (H,)}
    if spec.layout_module.HOLDS_VOCAB:
        shapes.update({"embed_tokens.weight": (spec.vocab, H), "d2t": (spec.lm_head_rows,), "t2d": (spec.vocab,)})
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
    arch = spec.layout_module
    req = set(expected_shapes(spec)) - {"t2d", "embed_tokens.weight", "d2t"} - arch.optional_keys(spec)
    if not spec.embed_from_target and arch.HOLDS_VOCAB:
        req.add("embed_tokens.weight")
    if spec.draft_vocab is None:
        req.discard("lm_head.weight")  # SGLang takes it from the target
    if spec.needs_d2t and arch.HOLDS_VOCAB:
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
            arch.unexpected_problem(canon, tuple(shape), spec, where)
            or Problem(
                E.UNEXPECTED_WEIGHT,
                f"{where}: unexpected tensor {canon} {list(shape)} — {likely_cause(canon, spec)}",
                key=canon,
            )
        ]
    want = shapes[canon]
    if tuple(shape) == want:
        return []
    if (p := arch.tensor_problem(canon, tuple(shape), want, spec, where)) is not None:
        return [p]
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
    """SGLang's EAGLE-3 draft classes (every layout holding a vocabulary) set load_lm_head_from_target when
    draft_vocab_size is null and the head is untied; the EAGLE worker's init_lm_head then installs the target's
    lm_head and embeddings (set_embed_and_head), replacing whatever the checkpoint gave."""
    return spec.draft_vocab is None and not spec.tie and spec.layout_module.HOLDS_VOCAB


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
