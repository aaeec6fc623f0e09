"""The target model as the draft rules see it: its config (hidden, vocab, layers, serving dtype) and, when
its weights are at hand, its lm_head (SGLang gives a draft whose draft_vocab_size is null the target's head)."""

from __future__ import annotations

from pathlib import Path

from ..server.runtime import language_config
from . import errors as E
from .errors import Problem
from .layers import HF_INDICES_FIELD
from .safetensors_io import FLOAT_DTYPES, scan_headers, values_equal


def declared_dtype(*cfgs: dict) -> str | None:
    """The first torch_dtype/dtype that these configs declare, in order; None if none does."""
    return next((c.get(k) for c in cfgs for k in ("torch_dtype", "dtype") if c.get(k)), None)


def serving_dtype(declared: str | None) -> str:
    """The dtype SGLang's `--dtype auto` gives a model whose config declares `declared`:
    float32 (or none) becomes float16."""
    d = str(declared or "float32").replace("torch.", "")
    return "float16" if d == "float32" else d


def target_problems(spec, target_cfg: dict, where: str, draft_cfg: dict | None = None) -> list[Problem]:
    """Draft vs target model config (hidden, vocab, layer indices, serving dtype)."""
    t = language_config(target_cfg)
    # a wrapper's text_config often leaves the dtype to the top level; declared nowhere: not judged here
    t_declared = declared_dtype(t, target_cfg)
    t_dtype = serving_dtype(t_declared)
    d_declared = declared_dtype(draft_cfg) if draft_cfg is not None else None
    P = []
    if draft_cfg is not None and t_declared and serving_dtype(d_declared) != t_dtype:
        P.append(
            Problem(
                E.DTYPE,
                f"{where}: SGLang would run the draft in {serving_dtype(d_declared)} (config "
                f"torch_dtype={d_declared!r}; auto maps "
                f"float32/none to float16) but the target in {t_dtype}: the first "
                f"request fails with 'expected mat1 and mat2 to have the same dtype'. Fix: set "
                f"torch_dtype to {t_dtype!r} in the draft config (`convert` writes the "
                f"weights' dtype), or serve with an explicit --dtype",
            )
        )
    th, tv = t.get("hidden_size"), t.get("vocab_size")
    if isinstance(th, int) and th != spec.target_hidden:
        P.append(
            Problem(
                E.TARGET_MISMATCH,
                f"{where}: draft expects target hidden size {spec.target_hidden} "
                f"(target_hidden_size/hidden_size) but the target has hidden_size={th}: "
                f"this draft was trained for another model",
            )
        )
    if isinstance(tv, int) and tv != spec.vocab:
        P.append(
            Problem(E.TARGET_MISMATCH, f"{where}: draft vocab_size={spec.vocab} but the target has vocab_size={tv}")
        )
    return P + spec.layout_module.target_problems(spec, t, where)


def hf_range_problems(spec, target: dict, where: str) -> list[Problem]:
    """An EAGLE-3 layout's target_problems: the recorded HF indices within what the target captures."""
    tn = target.get("num_hidden_layers")
    if isinstance(tn, int) and spec.hf_indices and any(not 0 <= i < tn for i in spec.hf_indices):
        return [
            Problem(
                E.LAYER_INDEX,
                f"{where}: {HF_INDICES_FIELD}={list(spec.hf_indices)} but the target has "
                f"{tn} layers; SGLang can capture HF hidden_states[0..{tn - 1}]",
            )
        ]
    return []


def captured_problems(spec, draft_cfg: dict, captured, n_target: int | None, release, where: str) -> list[Problem]:
    """The HF indices a server feeds the draft (its layout's fed_layers) against `captured`, those of the data it
    was trained on or is judged with (a dump's, an export's)."""
    fed, why = spec.layout_module.fed_layers(draft_cfg, spec, n_target, release)
    if fed is None:
        return [
            Problem(
                E.LAYER_INDEX, f"{where}: layers not compared with the data's {list(captured)}: {why}", warning=True
            )
        ]
    if list(fed) == list(captured):
        return []
    return [
        Problem(
            E.LAYER_INDEX,
            f"{where}: a server feeds the draft HF hidden_states{list(fed)} ({why}) but the data holds "
            f"{list(captured)}: it would be served other states than it learnt from; record the data's layers "
            f"in the draft (convert --hf-indices), or judge it with the data it was trained on",
        )
    ]


# a multimodal wrapper's own towers: never the language model's embeddings, head or norm
_NOT_LANGUAGE = ("vision_tower", "mm_projector")


def names_tensor(name: str, key: str) -> bool:
    """Whether the target's tensor `name` is its language model's `key` (e.g. "lm_head.weight"): the key itself, or
    the key under a wrapper's prefix ("language_model.lm_head.weight"), never a longer name that merely ends like it
    ("mtp_lm_head.weight") nor a vision tower's."""
    return (name == key or name.endswith("." + key)) and not any(t in name for t in _NOT_LANGUAGE)


def head_tensor(target_dir, target_cfg: dict | None, shape: tuple):
    """The target's lm_head (its embeddings when tied) from its safetensors headers, or None. Headers only:
    milliseconds even for a sharded 600 GB target."""

    tensors, _ = scan_headers(Path(target_dir))
    lc = language_config(target_cfg) if isinstance(target_cfg, dict) else {}
    wanted = ["lm_head.weight"] + (["embed_tokens.weight"] if lc.get("tie_word_embeddings") is True else [])
    for suffix in wanted:
        for name, info in sorted(tensors.items()):
            if names_tensor(name, suffix) and info.shape == tuple(shape) and info.dtype in FLOAT_DTYPES:
                return info
    return None


def same_as_target_head(draft_head, target_dir, target_cfg: dict | None, shape: tuple) -> tuple[bool | None, str]:
    """(True/False, where the target's head was read), or (None, why it cannot be told). draft_head: a
    TensorInfo or a tensor. Reads both heads once, in chunks."""

    if target_dir is None:
        return None, "no target given (check: pass --target DIR)"
    info = head_tensor(target_dir, target_cfg, shape)
    if info is None:
        return None, f"{target_dir} holds no safetensors lm_head {list(shape)}"
    same = values_equal(draft_head, info)
    where = f"{info.file}: {info.name}"
    return (same, where) if same is not None else (None, f"the draft's head dtype cannot be compared with {where}")
