"""Draft layouts: one module per draft class SGLang can build an EAGLE-3 draft as, and the one registry of them.

`rules`, the loader, `check`, `convert`, `swap`, `train` and `eval` know no layout by name: they find the draft's
layout module here (`layout_of(config)`, `get(spec.layout)`) and ask it, or build what it names (NET, TRAINING,
PLAN: "module:attr" strings, imported only when used). A new layout (an EAGLE-3.1 variant, P-EAGLE) is one
module declaring INTERFACE (llama.py is the reference, each name documented there) plus one line in LAYOUTS.

    layout_of(cfg)    the layout module a draft config names (its `architectures`); BadInput naming the known ones
    find(cfg)         the same, or None
    get(name)         the module registered under `name`; names(): every name, in registry order
    config_fields()   every layout's own config fields (read from a live config object by the loader)
    resolve(ref)      import a "module:attr" string (NET, TRAINING, PLAN) when a caller needs what it names

Imports nothing heavy: layout modules import only the draft's errors and keys.
"""

from __future__ import annotations

import importlib
import types

from ...boundary import BadInput

# name -> module (a path relative to this package, or a module object)
LAYOUTS: dict[str, str | types.ModuleType] = {
    "llama": ".llama",  # SGLang's LlamaForCausalLMEagle3 (speculators, SpecForge, EAGLE drafts)
    "mla": ".mla",  # SGLang's Eagle3DeepseekV2ForCausalLM (Kimi-K2.5's drafts)
    "dflash": ".dflash",  # SGLang's DFlashDraftModel (z-lab's and speculators' block-diffusion drafts)
}

# What every layout module declares (documented in llama.py).
INTERFACE = (
    "NAME",
    "ARCH",
    "LABEL",
    "SGLANG_CLASS",
    "ALGORITHM",
    "CONFIG_FIELDS",
    "DRAFT_VOCAB_REQUIRED",
    "HOLDS_VOCAB",
    "FUSED",
    "SOURCE_NAMES",
    "READERS",
    "CONFIG_DEFAULTS",
    "config_fields",
    "layer_ids",
    "aux_count",
    "option_problems",
    "layer_shapes",
    "optional_keys",
    "tensor_problem",
    "unexpected_problem",
    "target_problems",
    "fed_layers",
    "to_release",
    "reads_num_aux",
    "record_layers",
    "source_format",
    "source_key",
    "launch_problems",
    # what train, eval and swap build for it
    "NET",
    "TRAINING",
    "PLAN",
    "TRAIN_PADS_TO_TOTAL_SEQ_LEN",
    "TRAIN_SHARDS_WEIGHTS",
    "READS_DRAFT_WINDOW",
    "heldout",
    "default_aux_layers",
    "init_settings",
    "init_problems",
)


def names() -> tuple[str, ...]:
    return tuple(LAYOUTS)


def _known() -> str:
    return ", ".join(f"{n} ({get(n).ARCH})" for n in LAYOUTS)


def get(name: str) -> types.ModuleType:
    mod = LAYOUTS.get(name)
    if mod is None:
        raise BadInput("draft layout", f"{name!r} is not one; known layouts: {_known()}")
    return importlib.import_module(mod, __name__) if isinstance(mod, str) else mod


def modules() -> list[types.ModuleType]:
    return [get(n) for n in LAYOUTS]


def find(cfg) -> types.ModuleType | None:
    """The layout of the first `architectures` entry SGLang can build a draft from (SGLang's own order), or None."""
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    if not isinstance(archs, list):
        return None
    by_arch = {m.ARCH: m for m in modules()}
    return next((by_arch[a] for a in archs if isinstance(a, str) and a in by_arch), None)


def layout_of(cfg, where: str = "draft config"):
    """The layout module of a draft config; BadInput naming the known layouts when it names none of them."""
    mod = find(cfg)
    if mod is None:
        archs = cfg.get("architectures") if isinstance(cfg, dict) else None
        raise BadInput(
            where, f"architectures {archs!r} names no EAGLE-3 draft layout SGLang builds; known layouts: {_known()}"
        )
    return mod


def config_fields() -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for m in modules() for f in m.CONFIG_FIELDS))


def resolve(ref: str):
    """The object a "module:Class" string names (imports its module: only for callers that need the class)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
