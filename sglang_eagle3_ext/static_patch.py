"""The patches of `patch_table.PATCHES`, applied statically: a decorator the `patches/` diffs put
on SGLang's own methods, for images that bake SGLang instead of patching at run time.

    import sglang_eagle3_ext.static_patch                      # added by patches/<release>/*.patch
    ...
        @sglang_eagle3_ext.static_patch.patched("draft.strict_load")
        def load_weights(self, weights): ...

`patched(name)` wraps the function with the *same* wrapper function the runtime route uses
(`PATCHES[name].wrapper`, `wrapt.FunctionWrapper`), so behaviour is identical; the wrapper is
marked like a runtime patch, so a later `sglang_eagle3_ext.apply()` (or the .pth route) sees it
and does not wrap a second time. Whether a patch is on is decided when SGLang imports the module,
exactly as for the runtime route: the `draft` patches always, the `dump` patches when
`SGLANG_EAGLE3_EXT_DUMP_DIR` is set; a false `SGLANG_EAGLE3_EXT` (`0/false/no/off`) turns every baked patch off (plain
SGLang behaviour, for comparisons). Nothing heavy is imported here: the wrappers import their
implementation on first call.
"""

from __future__ import annotations

from . import envs
from .patch_table import ENV_ENABLE, PATCHES, features_from_env

_BY_NAME = {s.name: s for s in PATCHES}
_applied: list[str] = []
_skipped: list[str] = []


def _enabled(spec, env=None) -> bool:
    """Unset SGLANG_EAGLE3_EXT means on (the image was built with the patches); a false value off; a
    value outside the legal ones (envs.parse_bool, the rule of the runtime route) one log line and off."""
    try:
        if envs.raw(ENV_ENABLE, env) is not None and not envs.get(ENV_ENABLE, env):
            return False
    except envs.EnvError as e:
        import logging

        from ._log import log_once

        log_once(
            "baked-disabled", "sglang_eagle3_ext disabled in this process (baked patches): %s", e, level=logging.ERROR
        )
        return False
    return spec.feature in features_from_env(env)


def patched(name: str):
    """Decorator for the SGLang function that `PATCHES[name].target` names."""
    try:
        spec = _BY_NAME[name]
    except KeyError:
        raise RuntimeError(
            f"sglang_eagle3_ext: the baked patch names {name!r}, which this sglang-eagle3-ext version does not "
            f"have (known: {', '.join(sorted(_BY_NAME))}); regenerate the image's patch with patches/make_patches.py "
            f"from the installed sglang-eagle3-ext"
        ) from None

    qual = spec.target.partition(":")[2]

    def decorate(func):
        got = getattr(func, "__qualname__", None)
        if got != qual:  # a diff applied to the wrong release, with fuzz: refuse rather than wrap the wrong thing
            raise RuntimeError(
                f"sglang_eagle3_ext: baked patch {name!r} decorates {got!r} in {getattr(func, '__module__', '?')}, "
                f"expected {qual!r}: this SGLang was patched with the diff of another release; reinstall sglang and "
                f"apply patches/<its release>/ with `patch -p1 --fuzz=0`"
            )
        if not _enabled(spec):
            _skipped.append(name)
            return func
        import wrapt

        from .patching import PATCH_MARK, import_string

        fw = wrapt.FunctionWrapper(func, import_string(spec.wrapper))
        setattr(fw, PATCH_MARK, spec.name)
        _applied.append(name)
        return fw

    return decorate


def applied() -> list[str]:
    """Names of the baked patches active in this process (in import order)."""
    return list(_applied)


def skipped() -> list[str]:
    """Names of baked patches that were left off (feature not enabled) in this process."""
    return list(_skipped)
