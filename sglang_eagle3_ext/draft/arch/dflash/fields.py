"""What a DFlash draft's config.json says (draft/arch/dflash/'s config rules): the block size, the mask token id,
the target layer ids, and the sizes SGLang's DFlashDraftModel cannot honour. Where SGLang reads each key:
speculative/dflash_utils.parse_dflash_draft_config (dflash_config's value first, the top level's second)."""

from __future__ import annotations

from ....versions import _FLAG_SINCE
from ... import errors as E
from ...errors import Problem
from ...layers import HF_INDICES_FIELD, dflash_capture, dflash_default_ids

ARCH = "DFlashDraftModel"

DFLASH = "dflash_config"
# dflash_config keys SGLang's DFlashDraftModel reads (and ours); any other one belongs to a variant whose extra
# modules (grouped convolutions, selectors) these rules do not know
KNOWN = ("block_size", "target_layer_ids", "mask_token", "mask_token_id", "num_target_layers", HF_INDICES_FIELD)


def dflash_config(cfg: dict) -> dict:
    dc = cfg.get(DFLASH)
    return dc if isinstance(dc, dict) else {}


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_int(cfg: dict, key: str, where: str, P: list, minimum: int = 0):
    """(top-level value, dflash_config value) of `key`, each None when absent or not an integer >= minimum."""
    out = []
    for holder, name in ((cfg, key), (dflash_config(cfg), f"{DFLASH}.{key}")):
        v = holder.get(key)
        if v is not None and not (is_int(v) and v >= minimum):
            P.append(Problem(E.CONFIG_INVALID, f"{where}: `{name}` is {v!r}; expected an integer >= {minimum}"))
            v = None
        out.append(v)
    return tuple(out)


def block_size(cfg: dict, where: str, P: list) -> int:
    top, inner = read_int(cfg, "block_size", where, P)
    if top is not None and inner is not None and top != inner:
        P.append(
            Problem(
                E.BLOCK_SIZE,
                f"{where}: block_size={top} but {DFLASH}.block_size={inner}: SGLang drafts blocks of the "
                f"latter; keep only the block size the draft was trained with",
            )
        )
    block = inner if inner is not None else top
    if block is None:
        P.append(
            Problem(
                E.BLOCK_SIZE,
                f"{where}: `{DFLASH}.block_size` missing: SGLang would draft blocks of 16 (or "
                f"--speculative-num-draft-tokens), not the trained size; set it to the block size of training",
            )
        )
    elif block < 2:
        P.append(
            Problem(
                E.BLOCK_SIZE,
                f"{where}: {DFLASH}.block_size={block}: a block is the anchor token plus block_size - 1 drafted "
                f"ones, so it drafts nothing; set the trained block size (>= 2)",
            )
        )
    return block or 0


def mask_token_id(cfg: dict, where: str, P: list) -> int | None:
    top, inner = read_int(cfg, "mask_token_id", where, P)
    if inner is None and top is not None:
        P.append(
            Problem(
                E.MASK_TOKEN,
                f"{where}: mask_token_id={top} is at the top level only; SGLang 0.5.14 and 0.5.16 read "
                f"{DFLASH}.mask_token_id alone (else the tokenizer's <|MASK|>): move it into {DFLASH}",
            )
        )
    elif top is not None and top != inner:
        P.append(
            Problem(
                E.MASK_TOKEN,
                f"{where}: mask_token_id={top} but {DFLASH}.mask_token_id={inner}; keep only the trained one",
            )
        )
    elif inner is None:
        P.append(
            Problem(
                E.MASK_TOKEN,
                f"{where}: `{DFLASH}.mask_token_id` missing: SGLang would take the tokenizer's <|MASK|> "
                f"(adding it when absent), not the token the draft was trained with; set the trained id",
            )
        )
    m, vocab = inner if inner is not None else top, cfg.get("vocab_size")
    if m is not None and is_int(vocab) and m >= vocab:
        P.append(mask_outside(m, vocab, "vocab_size", where))
    return m


def mask_outside(m: int, vocab: int, what: str, where: str) -> Problem:
    return Problem(
        E.MASK_TOKEN,
        f"{where}: {DFLASH}.mask_token_id={m} is outside the vocabulary ({what} {vocab}): SGLang refuses it at "
        f"start-up (it does not grow the target's embeddings); set the trained mask token's id (< {vocab})",
    )


def shape_problems(cfg: dict, where: str) -> list[Problem]:
    """Sizes SGLang's class cannot honour: another vocabulary or width than the target's, unknown layers."""
    P: list[Problem] = []
    vocab, dv, h, th = (cfg.get(k) for k in ("vocab_size", "draft_vocab_size", "hidden_size", "target_hidden_size"))
    if is_int(dv) and is_int(vocab) and dv != vocab:
        P.append(
            Problem(
                E.UNSUPPORTED_OPTION,
                f"{where}: draft_vocab_size={dv} < vocab_size={vocab}: SGLang's {ARCH} drafts with the target's "
                f"full lm_head, not a reduced-vocabulary head; retrain with draft_vocab_size = vocab_size",
            )
        )
    if is_int(th) and is_int(h) and th != h:
        P.append(
            Problem(
                E.CONFIG_INVALID,
                f"{where}: target_hidden_size={th} but hidden_size={h}: SGLang's {ARCH} feeds the target's "
                f"embeddings and states as they are (fc takes K x hidden_size); a DFlash draft has the target's width",
            )
        )
    types = cfg.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != cfg.get("num_hidden_layers")):
        P.append(Problem(E.CONFIG_INVALID, f"{where}: layer_types must list one type per draft layer; got {types!r}"))
    elif types and not all(t in ("full_attention", "sliding_attention") for t in types):
        P.append(
            Problem(E.CONFIG_INVALID, f"{where}: layer_types {types}: SGLang's {ARCH} has full and sliding attention")
        )
    elif types and "sliding_attention" in types and not is_int(cfg.get("sliding_window")):
        P.append(Problem(E.CONFIG_INVALID, f"{where}: sliding_attention layers without a `sliding_window`"))
    if cfg.get("hidden_act", "silu") != "silu":
        P.append(Problem(E.UNSUPPORTED_OPTION, f"{where}: hidden_act={cfg['hidden_act']!r}: SGLang's {ARCH} is SiLU"))
    return P


def target_layer_ids(cfg: dict, where: str) -> tuple[list | None, list | None, list[Problem]]:
    """(target_layer_ids as SGLang reads them, the HF indices they make it capture, problems); (None, None, ..)
    when the config names none (SGLang's default ids)."""
    ids = dflash_config(cfg).get("target_layer_ids", cfg.get("target_layer_ids"))
    name = f"{DFLASH}.target_layer_ids"
    if ids is None:
        return (
            None,
            None,
            [
                Problem(
                    E.LAYER_INDEX,
                    f"{where}: `{name}` missing: SGLang feeds the draft its default target layers "
                    f"(build_target_layer_ids), whatever it was trained on; record the trained ids",
                    warning=True,
                )
            ],
        )
    if not (isinstance(ids, list) and ids and all(is_int(i) and i >= 0 for i in ids)):
        return None, None, [Problem(E.CONFIG_INVALID, f"{where}: `{name}` is {ids!r}; expected layer ids >= 0")]
    P: list[Problem] = []
    if any(a >= b for a, b in zip(ids, ids[1:])):
        P.append(
            Problem(
                E.LAYER_INDEX,
                f"{where}: {name}={ids} is not strictly increasing: SGLang captures each target layer once, "
                f"in layer order, so the fc would take other states than trained; list the trained ids ascending",
            )
        )
    hf = dflash_capture(ids)
    rec = dflash_config(cfg).get(HF_INDICES_FIELD)
    if rec is not None and rec != hf:
        P.append(
            Problem(
                E.LAYER_INDEX,
                f"{where}: {DFLASH}.{HF_INDICES_FIELD}={rec!r} (the trained HF indices) but {name}={ids} make "
                f"SGLang capture HF hidden_states{hf} (id + 1); set {name} to the trained indices - 1",
            )
        )
    return ids, hf, P


# --- the target's layer count -------------------------------------------------------------------------------
# SGLang's DFlashDraftModel resolves target_layer_ids against a target layer count at start-up
# (resolve_target_layer_ids: every id < it, else ValueError): num_target_layers where the config records one, else
# max(ids) + 1 where the release has BOUND_BY_MAX, else the draft's own num_hidden_layers. The target's side
# (spec_aux_hidden_state / model_runner) takes the served target's num_hidden_layers and only logs a recorded
# num_target_layers that differs.
BOUND_BY_MAX = "DFLASH_IDS_BOUND_BY_MAX"
SGLANG_REFUSAL = "DFLASH target_layer_ids contains an out-of-range layer id"


def num_target_layers(cfg: dict) -> int | None:
    """The recorded target layer count where SGLang reads it (dflash_config's, else the top level's); None when
    absent or not a count (config_fields names that)."""
    v = dflash_config(cfg).get("num_target_layers", cfg.get("num_target_layers"))
    return v if is_int(v) and v >= 1 else None


def ids_bound(cfg: dict, release) -> tuple[int | None, str]:
    """(the count the draft class bounds target_layer_ids by, what it is); None where it bounds none."""
    tn = num_target_layers(cfg)
    if tn is not None:
        return tn, f"{DFLASH}.num_target_layers={tn}"
    n = cfg.get("num_hidden_layers")
    if release.has(BOUND_BY_MAX) or not is_int(n) or n < 1:
        return None, ""
    return n, f"the draft's own num_hidden_layers={n}, as it does where the config records no num_target_layers"


def bound_problems(cfg: dict, ids: list, release, where: str) -> list[Problem]:
    """The start-up refusal of target_layer_ids at or past the count the draft class bounds them by."""
    bound, why = ids_bound(cfg, release)
    past = [(i, v) for i, v in enumerate(ids) if bound is not None and v >= bound]
    if not past:
        return []
    i, v = past[0]
    fix = (
        f"record {DFLASH}.num_target_layers = the target's num_hidden_layers (`check --target DIR` names it)"
        if num_target_layers(cfg) is None
        else f"set it to the target's num_hidden_layers (at least {max(ids) + 2}: ids are 0..n-2 of n layers)"
    )
    return [
        Problem(
            E.LAYER_INDEX,
            f"{where}: SGLang {release.release} refuses this draft at start-up ('{SGLANG_REFUSAL}. "
            f"target_layer_ids[{i}]={v}, target_num_layers={bound}.'): its {ARCH} bounds {DFLASH}.target_layer_ids="
            f"{list(ids)} by {why}; {fix}",
        )
    ]


def convert_count_warnings(out: dict, ids: list[int], release) -> list[str]:
    """convert: refused where the release's draft class would refuse the ids for want of num_target_layers, which
    the source does not record; a warning where only releases without BOUND_BY_MAX would."""
    n = out.get("num_hidden_layers")
    if num_target_layers(out) is not None or not is_int(n) or max(ids) < n:
        return []
    add = "\"num_target_layers\": N (the target's num_hidden_layers) to the source's config.json"
    said = f"bound {DFLASH}.target_layer_ids={ids} by the draft's num_hidden_layers={n} where the config records "
    if ids_bound(out, release)[0] is not None:
        raise E.conversion_refused(
            f"SGLang {release.release}'s {ARCH} would {said}no num_target_layers, refusing them at start-up "
            f"('{SGLANG_REFUSAL}'), and the source names no target layer count: add {add} and convert again "
            f"(train --draft-arch dflash records it)",
            E.CONFIG_MISSING,
        )
    since = _FLAG_SINCE[BOUND_BY_MAX]
    return [f"SGLang releases before {since} {said}no num_target_layers and refuse them at start-up; add {add}"]


def target_count_problems(spec, n: int, where: str) -> list[Problem]:
    """The recorded target layer count against the target's `n`: named where the draft class would refuse the
    ids without it; where another, what SGLang then captures (it goes by the served target, with a log line)."""
    tn, bound, ids = spec.dims.get("num_target_layers"), spec.dims.get("ids_bound"), spec.aux_ids
    if tn is None:
        if bound is not None and ids and max(ids) >= bound:
            return [
                Problem(
                    E.LAYER_INDEX,
                    f"{where}: set {DFLASH}.num_target_layers={n} (the target's num_hidden_layers): without it "
                    f"SGLang's {ARCH} bounds target_layer_ids={list(ids)} by {bound} and refuses them",
                )
            ]
        return []
    if tn == n:
        return []
    head = (
        f"{where}: {DFLASH}.num_target_layers={tn} (the target the draft was trained against) but the target has "
        f"num_hidden_layers={n}: SGLang logs that they differ and "
    )
    if ids:
        return [
            Problem(
                E.TARGET_MISMATCH,
                head + f"captures target_layer_ids={list(ids)} of this target as they are (hidden_states[id + 1]): the "
                f"trained layer numbers in a model of another depth; serve the target it was trained on, or record "
                f"num_target_layers={n} if this is it",
                warning=True,
            )
        ]
    served, trained = dflash_default_ids(n, spec.n_layers), dflash_default_ids(tn, spec.n_layers)
    if served is None or trained is None:
        return []  # aux_count and target_problems name a default SGLang cannot build
    return [
        Problem(
            E.LAYER_INDEX,
            head + f"captures its default ids {served} for {n} layers, not {trained}, the default for {tn} the draft "
            f"was trained on; record the trained {DFLASH}.target_layer_ids={trained}",
            warning=served == trained,
        )
    ]
