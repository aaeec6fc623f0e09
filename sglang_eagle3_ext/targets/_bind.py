"""Arguments of a wrapped SGLang call, by parameter name rather than by position (positions moved across
releases; names are what `compat` checks per release: PatchSpec.params). The signature is read once per
function; wrapt hands a method over bound to its instance, so `self` is not among the names then."""
from __future__ import annotations

import inspect

_SIGNATURES: dict = {}
_POSITIONS: dict = {}


def _signature(fn):
    func = getattr(fn, "__func__", fn)        # a bound method: one signature for all its instances
    try:
        sig = _SIGNATURES.get(func)
    except TypeError:                          # unhashable callable: read each time
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
            names = _POSITIONS[func] = [p.name for p in _signature(func).parameters.values()
                                        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return bind(wrapped, args, kwargs).get(name, default)
    if name not in names:
        return default
    pos = names.index(name) - (1 if getattr(wrapped, "__self__", None) is not None and func is not wrapped else 0)
    return args[pos] if 0 <= pos < len(args) else default
