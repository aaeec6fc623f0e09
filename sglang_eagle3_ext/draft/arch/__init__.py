"""Draft layouts: one folder per draft class SGLang can build a draft as, and the one registry of them.

`rules`, the loader, `check`, `convert`, `swap`, `train` and `eval` know no layout by name: they find the draft's
layout here (`layout_of(config)`, `get(spec.layout)`) and ask it. A layout is a package `draft/arch/<layout>/` with
fixed roles (llama/ is the reference, each name documented there):

    __init__.py   the declaration: every member of `Layout` (fields, shapes, key mapping, problems, SGLang class,
                  held-out rule, init-from settings, ROUTE: the folder training/<ROUTE>/ that trains and plans it)
    net.py        eval's SGLang-equal network, `Net(config) -> nn.Module` (torch: imported only by `net(layout)`)
    fields.py     optional: its config rules, when they outgrow the declaration (dflash/)

and one `register(...)` line below, which refuses a layout missing a member, holding one of the wrong kind or
lacking a required role, in one line naming the layout and what it lacks.

    layout_of(cfg)    the layout a draft config names (its `architectures`); BadInput naming the known ones
    find(cfg)         the same, or None
    get(name)         the layout registered under `name`; names(): every name, in registry order
    config_fields()   every layout's own config fields (read from a live config object by the loader)
    net(layout)       its network class (imports its net.py)

Imports nothing heavy: a declaration imports only the draft's errors, keys and layer rules.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ...boundary import BadInput
from . import dflash, llama, mla

ROLES = ("net",)  # the modules every layout folder holds beside its declaration
ROUTE_ROLES = ("train", "plan")  # the modules of training/<ROUTE>/: `train(options, rule)`, `step(...)` (the plan)
_TRAINING = Path(__file__).resolve().parents[2] / "training"


class Layout(Protocol):
    """What a layout's declaration holds, each member of the kind named (a layout is its package's module)."""

    NAME: str
    ARCH: str
    LABEL: str | None
    SGLANG_CLASS: str
    ALGORITHM: str
    ROUTE: str
    CONFIG_FIELDS: tuple
    DRAFT_VOCAB_REQUIRED: bool
    HOLDS_VOCAB: bool
    FUSED: dict
    SOURCE_NAMES: tuple
    READERS: dict
    CONFIG_DEFAULTS: dict
    TRAIN_PADS_TO_TOTAL_SEQ_LEN: bool
    TRAIN_SHARDS_WEIGHTS: bool
    READS_DRAFT_WINDOW: bool
    config_fields: Callable
    layer_ids: Callable
    aux_count: Callable
    option_problems: Callable
    layer_shapes: Callable
    optional_keys: Callable
    tensor_problem: Callable
    unexpected_problem: Callable
    target_problems: Callable
    fed_layers: Callable
    to_release: Callable
    reads_num_aux: Callable
    record_layers: Callable
    source_format: Callable
    source_key: Callable
    launch_problems: Callable
    heldout: Callable
    default_aux_layers: Callable
    init_settings: Callable
    init_problems: Callable


# what a layout with FUSED entries also defines (mla/ documents them)
FUSED_MEMBERS = ("prefused_problem", "half_missing_problem", "split_fused")


class LayoutRefused(TypeError):
    """A layout that does not conform: raised by `register`, one line naming the layout and what it lacks."""


def _kind_ok(value, hint) -> bool:
    if isinstance(hint, types.UnionType):
        return any(_kind_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Callable:
        return callable(value)
    return isinstance(value, hint)


def _kind_name(hint) -> str:
    if typing.get_args(hint):
        return " | ".join(_kind_name(h) for h in typing.get_args(hint))
    return "None" if hint is type(None) else hint.__name__


def _has_module(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None  # finds the file; imports nothing of it
    except (ImportError, ValueError):
        return False


def problems(layout) -> list[str]:
    """What keeps `layout` (a declaration module) from conforming to `Layout` and its roles; [] when it conforms."""
    out = []
    for member, hint in typing.get_type_hints(Layout).items():
        if not hasattr(layout, member):
            out.append(f"no {member}")
        elif not _kind_ok(getattr(layout, member), hint):
            out.append(f"{member} is {type(getattr(layout, member)).__name__}, not {_kind_name(hint)}")
    if getattr(layout, "FUSED", None):
        out += [f"no {m} (it has FUSED entries)" for m in FUSED_MEMBERS if not callable(getattr(layout, m, None))]
    out += [f"no {layout.__name__}.{r} module" for r in ROLES if not _has_module(f"{layout.__name__}.{r}")]
    route = getattr(layout, "ROUTE", None)
    if isinstance(route, str):
        out += [f"ROUTE {route!r}: no training/{route}/{r}.py" for r in ROUTE_ROLES if not _route_file(route, r)]
    return out


def _route_file(route: str, role: str) -> bool:
    return route.isidentifier() and (_TRAINING / route / f"{role}.py").is_file()


def register(layout):
    """Add `layout` under its NAME once it conforms (LayoutRefused otherwise); returns it."""
    name = getattr(layout, "NAME", None) or getattr(layout, "__name__", repr(layout))
    bad = problems(layout)
    if bad:
        raise LayoutRefused(f"draft layout {name!r} ({layout.__name__}) does not conform: {'; '.join(bad)}")
    LAYOUTS[name] = layout
    return layout


def names() -> tuple[str, ...]:
    return tuple(LAYOUTS)


def _known() -> str:
    return ", ".join(f"{n} ({m.ARCH})" for n, m in LAYOUTS.items())


def get(name: str) -> Layout:
    layout = LAYOUTS.get(name)
    if layout is None:
        raise BadInput("draft layout", f"{name!r} is not one; known layouts: {_known()}")
    return layout


def modules() -> list[Layout]:
    return list(LAYOUTS.values())


def find(cfg) -> Layout | None:
    """The layout of the first `architectures` entry SGLang can build a draft from (SGLang's own order), or None."""
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    if not isinstance(archs, list):
        return None
    by_arch = {m.ARCH: m for m in modules()}
    return next((by_arch[a] for a in archs if isinstance(a, str) and a in by_arch), None)


def layout_of(cfg, where: str = "draft config") -> Layout:
    """The layout of a draft config; BadInput naming the known layouts when it names none of them."""
    layout = find(cfg)
    if layout is None:
        archs = cfg.get("architectures") if isinstance(cfg, dict) else None
        raise BadInput(
            where, f"architectures {archs!r} names no EAGLE-3 draft layout SGLang builds; known layouts: {_known()}"
        )
    return layout


def config_fields() -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for m in modules() for f in m.CONFIG_FIELDS))


def net(layout: Layout) -> type:
    """The layout's network class (its net.py's `Net`; imports torch)."""
    return importlib.import_module(f"{layout.__name__}.net").Net


LAYOUTS: dict[str, Layout] = {}
register(llama)  # SGLang's LlamaForCausalLMEagle3 (speculators, SpecForge, EAGLE drafts)
register(mla)  # SGLang's Eagle3DeepseekV2ForCausalLM (Kimi-K2.5's drafts)
register(dflash)  # SGLang's DFlashDraftModel (z-lab's and speculators' block-diffusion drafts)
