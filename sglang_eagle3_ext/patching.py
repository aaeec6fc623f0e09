"""wrapt mechanics for the patch table: idempotent apply, exact revert, a list of what is active; and the
arguments of a wrapped SGLang call read by parameter name (`bind`, `arg`)."""

from __future__ import annotations

import importlib
import inspect
import threading

from ._log import logger
from .patch_table import PATCHES, PatchSpec, features_from_env

PATCH_MARK = "_self_sge3_patch"
_lock = threading.RLock()
# name -> (owner, attr, original, original_was_own_attr)
_active: dict[str, tuple[object, str, object, bool]] = {}


class PatchTargetMissing(RuntimeError):
    pass


def import_string(path: str):
    mod, _, qual = path.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _sglang_version() -> str:
    from .versions import installed_version

    return installed_version() or "<not installed>"


def resolve_target(spec: PatchSpec) -> tuple[object, str]:
    """(owner, attribute) of a target, or PatchTargetMissing naming the target and the release."""
    mod_name, _, qual = spec.target.partition(":")
    *owner_path, attr = qual.split(".")
    try:
        owner = importlib.import_module(mod_name)
    except ImportError as e:
        raise PatchTargetMissing(
            f"patch {spec.name}: module {mod_name} not importable in sglang {_sglang_version()} ({e}); "
            f"run `python -m sglang_eagle3_ext.compat` to see which targets moved"
        ) from e
    for part in owner_path:
        owner = getattr(owner, part, None)
        if owner is None:
            break
    if owner is None or not hasattr(owner, attr):
        raise PatchTargetMissing(
            f"patch {spec.name}: target {spec.target} not found in sglang {_sglang_version()}; "
            f"this release moved it — run `python -m sglang_eagle3_ext.compat` or pin sglang to a supported release"
        )
    return owner, attr


def apply_spec(spec: PatchSpec) -> bool:
    """Apply one patch; False if it was already active (a second apply is a no-op)."""
    import wrapt

    with _lock:
        owner, attr = resolve_target(spec)
        current = owner.__dict__.get(attr, getattr(owner, attr))
        if getattr(current, PATCH_MARK, None) == spec.name:
            return False
        wrapper = import_string(spec.wrapper)
        fw = wrapt.FunctionWrapper(current, wrapper)
        setattr(fw, PATCH_MARK, spec.name)
        _active[spec.name] = (owner, attr, current, attr in owner.__dict__)
        setattr(owner, attr, fw)
        logger.debug("patched %s (%s)", spec.target, spec.name)
        return True


def revert_spec(name: str) -> bool:
    with _lock:
        entry = _active.pop(name, None)
        if entry is None:
            return False
        owner, attr, original, was_own = entry
        if was_own:
            setattr(owner, attr, original)
        else:
            delattr(owner, attr)
        return True


def selected(features=None, module: str | None = None) -> list[PatchSpec]:
    from .versions import capabilities

    feats = features_from_env() if features is None else frozenset(features)
    caps = None
    out = []
    for spec in PATCHES:
        if spec.feature not in feats or (module and spec.module != module):
            continue
        if spec.requires:
            caps = caps or capabilities()
            if not getattr(caps, spec.requires):
                continue
        out.append(spec)
    return out


def active() -> list[str]:
    with _lock:
        return [n for n in _active]


# Arguments by name rather than by position: positions moved across releases; names are what `compat` checks
# per release (PatchSpec.params). The signature is read once per function; wrapt hands a method over bound to
# its instance, so `self` is not among the names then.
_SIGNATURES: dict = {}
_POSITIONS: dict = {}


def _signature(fn):
    func = getattr(fn, "__func__", fn)  # a bound method: one signature for all its instances
    try:
        sig = _SIGNATURES.get(func)
    except TypeError:  # unhashable callable: read each time
        return inspect.signature(func)
    if sig is None:
        sig = _SIGNATURES[func] = inspect.signature(func)
    return sig


def bind(wrapped, args, kwargs) -> dict:
    """{parameter name: value} of this call (defaults not filled in: a name absent was not passed);
    {} when the callable's signature cannot be read or does not take these arguments."""
    try:
        sig = _signature(wrapped)
        if getattr(wrapped, "__self__", None) is not None and hasattr(wrapped, "__func__"):
            return dict(sig.bind_partial(wrapped.__self__, *args, **kwargs).arguments)
        return dict(sig.bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {}


def arg(wrapped, args, kwargs, name: str, default=None):
    """One argument of this call by name, for the per-forward paths: kwargs, else its position (read once per
    function from the signature) — no Signature.bind per call (~3 us against ~0.1 us)."""
    if name in kwargs:
        return kwargs[name]
    func = getattr(wrapped, "__func__", wrapped)
    try:
        names = _POSITIONS.get(func)
        if names is None:
            names = _POSITIONS[func] = [
                p.name
                for p in _signature(func).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
    except (TypeError, ValueError):
        return bind(wrapped, args, kwargs).get(name, default)
    if name not in names:
        return default
    pos = names.index(name) - (1 if getattr(wrapped, "__self__", None) is not None and func is not wrapped else 0)
    return args[pos] if 0 <= pos < len(args) else default
