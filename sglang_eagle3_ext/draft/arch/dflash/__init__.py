"""The DFlash draft layout: SGLang's `DFlashDraftModel` (models/dflash.py, 0.5.14+), the block-diffusion drafts
of z-lab and speculators (`speculators_model_type: dflash`). Qwen3-style decoder layers (q_norm/k_norm of
head_dim; every layer takes hidden, no 2 x hidden first layer), `fc` over K target states (K*hidden -> hidden, no
bias), `hidden_norm`, `norm`; no embeddings, lm_head or d2t: it drafts with the target's.
What the release does, and where it fails silently:
  - load_weights skips every name it cannot resolve and never checks that each parameter got a tensor; only
    fc.weight's shape is checked;
  - dflash_config.block_size wins over a top-level block_size (default 16); mask_token_id is read from
    dflash_config (0.5.14/0.5.16 there only); without one the tokenizer's "<|MASK|>" is used, or added;
  - K = len(target_layer_ids), else one per draft layer (layers.dflash_default_ids); the target captures
    HF hidden_states[id + 1] for every id (layers.dflash_capture), once each, in layer order.
The names this module declares are those of draft/arch/llama/ (the reference).
"""

from __future__ import annotations

from ... import errors as E
from ...errors import Problem
from ...keys import LAYER
from ...layers import HF_INDICES_FIELD, dflash_aux_layers, dflash_capture, dflash_default_ids, dflash_ids
from . import fields as F
from .fields import DFLASH, dflash_config, is_int

NAME = "dflash"
ARCH = F.ARCH  # "DFlashDraftModel"
LABEL = "DFlash"
SGLANG_CLASS = "sglang.srt.models.dflash:DFlashDraftModel"
ALGORITHM = "DFLASH"  # the --speculative-algorithm that serves this layout (launch refuses another)
ROUTE = "dflash"
TRAIN_PADS_TO_TOTAL_SEQ_LEN = True  # speculators' trainer packs samples into --total-seq-len rows
TRAIN_SHARDS_WEIGHTS = True  # FSDP through speculators' trainer
READS_DRAFT_WINDOW = True  # the DFlash worker keeps a compact draft cache of --speculative-draft-window-size
REQUIRES = "HAS_DFLASH"
SINCE = "0.5.14"
CONFIG_FIELDS: tuple[str, ...] = ()  # its own fields sit in dflash_config, read by config_fields
DRAFT_VOCAB_REQUIRED = False
HOLDS_VOCAB = False  # no embeddings, lm_head or d2t: the target's are used
FUSED: dict[str, tuple[str, ...]] = {}
SOURCE_NAMES = ("speculators DFlash (speculators_model_type dflash)", f"{ARCH} (z-lab, SGLang)")
CONFIG_DEFAULTS = {"model_type": "qwen3"}  # SGLang reads the config through AutoConfig
READERS: dict = {}  # filled below: convert's readers of the two source formats
_DROP = {"architectures", "auto_map", "transformers_version", "_name_or_path"}  # not the draft's own config


def config_fields(cfg: dict, release, where: str) -> tuple[dict, list[Problem]]:
    """The block size, mask token id and attention bias (DraftSpec.dims), and the config's problems."""
    P = E.class_missing(where, ARCH, "a DFlash draft", release, REQUIRES, SINCE, "DFlash")
    if cfg.get(DFLASH) is not None and not isinstance(cfg.get(DFLASH), dict):
        P.append(Problem(E.CONFIG_INVALID, f"{where}: `{DFLASH}` is {cfg[DFLASH]!r}; expected an object"))
    block = F.block_size(cfg, where, P)
    mask = F.mask_token_id(cfg, where, P)
    F.read_int(cfg, "num_target_layers", where, P, minimum=1)
    for k, v in dflash_config(cfg).items():
        if k not in F.KNOWN and v not in (None, 0, False):
            P.append(
                Problem(
                    E.UNSUPPORTED_OPTION,
                    f"{where}: {DFLASH}.{k}={v!r}: a DFlash variant whose extra modules these rules do not check",
                )
            )
    bias = cfg.get("attention_bias", False)
    if not isinstance(bias, bool):
        P.append(Problem(E.CONFIG_INVALID, f"{where}: attention_bias is {bias!r}; expected true or false"))
    P += F.shape_problems(cfg, where)
    dims = {"block_size": block, "mask_token_id": mask, "attention_bias": bias is True}
    bound = F.ids_bound(cfg, release)[0] if release.has(REQUIRES) else None
    dims.update(num_target_layers=F.num_target_layers(cfg), ids_bound=bound)
    return dims, P


layer_ids = F.target_layer_ids  # (ids SGLang reads, the HF indices it captures for them, problems)


def aux_count(cfg: dict, ids, release, where: str) -> tuple[int, list[Problem]]:
    """K: one per target layer id (which the draft class resolves, refusing one past its bound: F.bound_problems),
    else one per draft layer (the length of SGLang's default ids)."""
    if ids:
        return len(ids), F.bound_problems(cfg, ids, release, where) if release.has(REQUIRES) else []
    n = cfg.get("num_hidden_layers") if is_int(cfg.get("num_hidden_layers")) else 1
    tn = dflash_config(cfg).get("num_target_layers", cfg.get("num_target_layers"))
    if dflash_default_ids(tn if is_int(tn) else n, n) is None:
        return n, [
            Problem(
                E.CONFIG_INVALID,
                f"{where}: no target_layer_ids, and SGLang's {ARCH} builds its default ids over "
                f"{'num_target_layers=' + str(tn) if is_int(tn) else f'num_hidden_layers={n}'} layers, which it "
                f"refuses for {n} draft layers (fewer than 4); record the trained {DFLASH}.target_layer_ids",
            )
        ]
    return n, []


def option_problems(cfg: dict, release, where: str) -> list[Problem]:
    return []  # config_fields judges this class's options


def layer_shapes(spec) -> dict[str, tuple[int, ...]]:
    """The decoder layers (Qwen3: q_norm/k_norm of head_dim) and hidden_norm, over the fc's output."""
    H, hd = spec.hidden, spec.head_dim
    q, kv = spec.n_heads * hd, spec.n_kv * hd
    shapes = {"hidden_norm.weight": (H,)}
    for n in range(spec.n_layers):
        a, m = f"layers.{n}.self_attn.", f"layers.{n}.mlp."
        shapes.update(
            {
                a + "q_proj.weight": (q, H),
                a + "k_proj.weight": (kv, H),
                a + "v_proj.weight": (kv, H),
                a + "o_proj.weight": (H, q),
                a + "q_norm.weight": (hd,),
                a + "k_norm.weight": (hd,),
                m + "gate_proj.weight": (spec.inter, H),
                m + "up_proj.weight": (spec.inter, H),
                m + "down_proj.weight": (H, spec.inter),
                f"layers.{n}.input_layernorm.weight": (H,),
                f"layers.{n}.post_attention_layernorm.weight": (H,),
            }
        )
        if spec.dims.get("attention_bias"):
            shapes.update({a + "q_proj.bias": (q,), a + "k_proj.bias": (kv,), a + "v_proj.bias": (kv,)})
            shapes[a + "o_proj.bias"] = (H,)
    return shapes


def optional_keys(spec) -> set[str]:
    return set()  # every parameter needs its trained value


def _ids_words(spec) -> str:
    if spec.aux_ids:
        return f"{DFLASH}.target_layer_ids={list(spec.aux_ids)}"
    return f"no target_layer_ids: SGLang's default, one per draft layer (num_hidden_layers={spec.n_layers})"


def tensor_problem(canon: str, shape: tuple, want: tuple, spec, where: str) -> Problem | None:
    """fc.weight of another K: the layer ids name other target states than the draft was trained on."""
    H = spec.hidden
    if canon == "fc.weight" and len(shape) == 2 and shape[0] == H and shape[1] % H == 0 and shape[1]:
        got = shape[1] // H
        return Problem(
            E.AUX_COUNT,
            f"{where}: fc.weight is {list(shape)} = {got}x{H} (trained on {got} target layers) but SGLang builds "
            f"it for K={spec.k} ({_ids_words(spec)}); set {DFLASH}.target_layer_ids to the {got} trained layers",
            key=canon,
        )
    return None


def unexpected_problem(canon: str, shape: tuple, spec, where: str) -> Problem | None:
    """A tensor SGLang's class holds no parameter for: its load_weights drops it without a word."""
    if canon in ("lm_head.weight", "d2t", "t2d"):
        reduced = canon != "lm_head.weight" or shape[:1] != (spec.vocab,)
        what = "a reduced-vocabulary draft's" if reduced else "a"
        return Problem(
            E.UNSUPPORTED_OPTION,
            f"{where}: {canon} {list(shape)}: {what} {'token map' if canon != 'lm_head.weight' else 'head'}, but "
            f"SGLang's {ARCH} has none: it drafts with the target's lm_head over all {spec.vocab} tokens. "
            + (
                "Retrain with draft_vocab_size = vocab_size"
                if reduced
                else "Delete it if it is the target's copy, else retrain with the target's head"
            ),
            key=canon,
        )
    m = LAYER.match(canon)
    if m and int(m.group(1)) < spec.n_layers:
        leaf = ".".join(canon.split(".")[-2:])
        same = [k for k in layer_shapes(spec) if k.startswith(f"layers.{m.group(1)}.") and k.endswith("." + leaf)]
        if same:
            return Problem(
                E.UNEXPECTED_WEIGHT,
                f"{where}: {canon} {list(shape)} is no name SGLang's {ARCH} loads (it drops it without a word); "
                f"it holds {same[0]}: save the weight under that name",
                key=canon,
            )
    return None


def to_release(canon: str, release) -> tuple[str | None, Problem | None]:
    return canon, None  # the release loads `layers.*`, `fc`, `hidden_norm`, `norm` as they are, `model.` or not


def launch_problems(dims: dict, flags: dict) -> list[str]:
    """launch: SGLang takes the block size from --speculative-num-draft-tokens / --speculative-dflash-block-size
    over the draft's config without a word; a draft trained on blocks of B drafts blocks of another size there."""
    block = dims.get("block_size")
    out = []
    for flag in ("speculative_dflash_block_size", "speculative_num_draft_tokens"):
        v = flags.get(flag)
        if v is not None and block is not None and int(v) != int(block):
            name = "--" + flag.replace("_", "-")
            out.append(f"{name} {v}, but the draft was trained on blocks of {block}: drop {name} or set it to {block}")
    return out[:1]


def reads_num_aux(release) -> bool:
    return False  # K = len(target_layer_ids)


# --- against the target -----------------------------------------------------------------------------------


def _fed_ids(spec, n: int) -> list[int] | None:
    return list(spec.aux_ids) if spec.aux_ids else dflash_default_ids(n, spec.n_layers)


def target_problems(spec, target: dict, where: str) -> list[Problem]:
    """The layer ids within what a target of its layer count captures; the mask token within its vocabulary."""
    n, vocab, mask = target.get("num_hidden_layers"), target.get("vocab_size"), spec.dims.get("mask_token_id")
    P = []
    if is_int(vocab) and mask is not None and mask >= vocab:
        P.append(F.mask_outside(mask, vocab, "the target's vocab_size", where))
    if not is_int(n):
        return P
    P += F.target_count_problems(spec, n, where)
    ids = _fed_ids(spec, n)
    if ids is None:
        return P + [
            Problem(
                E.CONFIG_INVALID,
                f"{where}: no {DFLASH}.target_layer_ids and SGLang's default cannot be built for a target of {n} "
                f"layers and {spec.n_layers} draft layers (SGLang refuses it); record the trained ids",
            )
        ]
    named = f"{DFLASH}.target_layer_ids={ids}" if spec.aux_ids else f"SGLang's default ids {ids}"
    if any(not 0 <= i <= n - 2 for i in ids):
        P.append(
            Problem(
                E.LAYER_INDEX,
                f"{where}: {named} but the target has {n} layers: SGLang captures hidden_states[id + 1] at the input "
                f"of layer id + 1, so ids 0..{n - 2} (id {n - 1}, the last layer's output, is never captured and "
                f"the fc would be short of states); set the ids the draft was trained on",
            )
        )
    elif len(set(ids)) != len(ids):
        P.append(Problem(E.LAYER_INDEX, f"{where}: {named} repeats a layer, which SGLang captures once"))
    return P


def fed_layers(cfg: dict, spec, n_target: int | None, release) -> tuple[list[int] | None, str]:
    """(HF indices a server feeds the draft, why): each target layer id + 1, the default ids' when it names none
    (None: the target's layer count is needed and unknown)."""
    if spec.aux_ids:
        return dflash_capture(spec.aux_ids), f"{DFLASH}.target_layer_ids + 1"
    ids = _fed_ids(spec, n_target) if n_target else None
    if ids is None:
        return None, "no target_layer_ids: SGLang's default depends on the target's layer count"
    return dflash_capture(ids), f"SGLang's default ids {ids} + 1"


# --- convert ----------------------------------------------------------------------------------------------


def source_format(cfg: dict) -> str | None:
    archs = cfg.get("architectures") or []
    if cfg.get("speculators_model_type") == "dflash":
        return "speculators-dflash"  # save_pretrained writes architectures ["DFlashDraftModel"] too
    if ARCH in archs and not cfg.get("speculators_model_type") and "transformer_layer_config" not in cfg:
        return "z-lab"  # z-lab's published drafts: SGLang's layout already
    return None


def source_key(canon: str, fmt: str) -> tuple[str, str | None]:
    return canon, None  # speculators' body keys are SGLang's


def _refuse(msg: str, code: str = E.UNSUPPORTED_OPTION):
    raise E.conversion_refused(msg, code)


def from_speculators(cfg: dict, hf_override) -> tuple[dict, list[int]]:
    """A speculators DFlash config as SGLang's, and the HF indices it was trained on.

    The +1 rule: speculators' aux_hidden_state_layer_ids are transformers hidden_states indices; SGLang's
    target_layer_ids are "after layer i" ids, id = index - 1 (layers.dflash_ids), captured back as id + 1.
    speculators' own z-lab converter (convert/dflash/converter.py) maps the other way,
    aux = [i + 1 for i in z-lab ids if i + 1 != n]: the verifier's last layer (z-lab id n - 1, index n) is never
    an aux state there but the separate verifier_last_hidden_states (it slices fc down to the other ids). A
    speculators draft's aux indices are therefore < n and map one to one; an index n would be SGLang id n - 1,
    which no target captures (its loop ends before index n): `check --target` refuses ids past n - 2."""
    tl = cfg.get("transformer_layer_config")
    if not isinstance(tl, dict):
        _refuse("a speculators DFlash config without its transformer_layer_config object", E.CONFIG_INVALID)
    if cfg.get("sample_from_anchor"):
        _refuse("sample_from_anchor=true: SGLang's DFlash drafts the block_size - 1 tokens after the anchor only")
    if cfg.get("sliding_window_non_causal") and "sliding_attention" in (tl.get("layer_types") or []):
        _refuse("sliding_window_non_causal=true: SGLang runs DFlash's sliding-window layers causally")
    if cfg.get("draft_vocab_size") not in (None, tl.get("vocab_size")):
        _refuse(
            f"draft_vocab_size={cfg['draft_vocab_size']} < vocab_size={tl.get('vocab_size')}: SGLang's DFlash drafts "
            f"with the target's full lm_head, not the trained reduced-vocabulary one; retrain with the full vocabulary"
        )
    hf = hf_override or cfg.get("aux_hidden_state_layer_ids")
    if not hf:
        _refuse(
            "the speculators config has no aux_hidden_state_layer_ids; pass --hf-indices with the HF "
            "hidden_states indices used in training",
            E.CONFIG_MISSING,
        )
    if not (isinstance(hf, (list, tuple)) and all(is_int(i) for i in hf)):
        _refuse(
            f"aux_hidden_state_layer_ids={hf!r} is no list of HF hidden_states indices; pass --hf-indices with "
            f"those used in training",
            E.CONFIG_INVALID,
        )
    out = {k: v for k, v in tl.items() if k not in _DROP}
    out.update(architectures=[ARCH], model_type=tl.get("model_type") or "qwen3", tie_word_embeddings=False)
    th = cfg.get("target_hidden_size")
    if th is not None:
        out["target_hidden_size"] = th  # the rules refuse one that is not hidden_size
    tn = cfg.get("num_target_layers")  # the target's layer count: train --draft-arch dflash records it
    if tn is not None and not (is_int(tn) and tn >= 1):
        _refuse(
            f"num_target_layers={tn!r}: expected the target's num_hidden_layers (an integer >= 1)", E.CONFIG_INVALID
        )
    keep = ("block_size", "mask_token_id", "num_target_layers")
    out[DFLASH] = {k: cfg[k] for k in keep if cfg.get(k) is not None}
    return out, list(hf)


def from_sglang(cfg: dict, hf_override) -> tuple[dict, list[int] | None]:
    """A z-lab / SGLang DFlash config: block_size and mask_token_id kept in dflash_config, where every release
    reads them (values that disagree stay, for the rules to refuse)."""
    out = {k: v for k, v in cfg.items() if k not in _DROP}
    out["architectures"] = [ARCH]
    for k, v in CONFIG_DEFAULTS.items():
        out.setdefault(k, v)
    dc = dict(dflash_config(out))
    for k in ("block_size", "mask_token_id", "target_layer_ids"):
        if k in out and dc.get(k, out[k]) == out[k]:
            dc[k] = out.pop(k)
    out[DFLASH] = dc
    ids = dc.get("target_layer_ids")
    ok = isinstance(ids, list) and ids and all(is_int(i) and i >= 0 for i in ids)
    return out, (list(hf_override) if hf_override else dflash_capture(ids) if ok else None)


READERS.update({"speculators-dflash": from_speculators, "z-lab": from_sglang})


def record_layers(out: dict, hf, release) -> list[str]:
    """convert: the trained HF indices as SGLang's target_layer_ids (index - 1) and, recorded, as they are."""
    if not hf:
        return []
    if not (isinstance(hf, list) and all(is_int(i) for i in hf)):
        _refuse(f"HF indices {hf!r}: expected a list of integers", E.CONFIG_INVALID)
    if min(hf) < 1:
        _refuse(
            f"HF indices {list(hf)}: index 0 (the embeddings) is no DFlash context state: SGLang captures "
            f"hidden_states[id + 1] for every id >= 0",
            E.LAYER_INDEX,
        )
    dc = out.setdefault(DFLASH, {})
    dc["target_layer_ids"], dc[HF_INDICES_FIELD] = dflash_ids(hf), list(hf)
    return F.convert_count_warnings(out, dc["target_layer_ids"], release) if release.has(REQUIRES) else []


# --- train and eval ---------------------------------------------------------------------------------------


def heldout(n: int, train_ratio: float) -> tuple[int, str]:
    """Rows [int(n * train_ratio), n): speculators' validation split, which the DFlash route trains through."""
    start = int(n * train_ratio)
    return start, f"rows {start}..{n - 1} of {n}: the DFlash route's validation split at --train-ratio {train_ratio:g}"


default_aux_layers = dflash_aux_layers  # one per draft layer, SGLang's rule with its +1


def init_settings(spec, cfg: dict) -> dict:
    s = {"head_dim": spec.head_dim}
    if is_int(cfg.get("max_position_embeddings")):
        s["max_position_embeddings"] = cfg["max_position_embeddings"]
    return s


def init_problems(spec, cfg: dict) -> list[str]:
    return []  # every DFlash draft of this layout is one the route builds
