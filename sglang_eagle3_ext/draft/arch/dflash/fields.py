"""What a DFlash draft's config.json says (draft/arch/dflash/'s config rules): the block size, the mask token id,
the target layer ids, and the sizes SGLang's DFlashDraftModel cannot honour. Where SGLang reads each key:
speculative/dflash_utils.parse_dflash_draft_config (dflash_config's value first, the top level's second)."""

from __future__ import annotations

from ... import errors as E
from ...errors import Problem
from ...layers import HF_INDICES_FIELD, dflash_capture

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
