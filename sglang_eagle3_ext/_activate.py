"""The one bootstrap every route calls: explicit apply(), the .pth start-up hook, SGLang's plugin entry point.

Start-up routes (.pth, plugin) never raise: any error is logged as one line and the package stays
disabled in that process. The explicit route raises.
"""

from __future__ import annotations

from .patch_table import ENV_ENABLE, PATCHES

_disabled_reason: str | None = None
_hooks_registered = False


def apply(features=None) -> list[str]:
    """Patch the installed SGLang now (imports the target modules). Raises on any problem."""
    from . import patching
    from .versions import check_supported

    check_supported()
    changed = [s.name for s in patching.selected(features) if patching.apply_spec(s)]
    return changed


def revert() -> list[str]:
    from . import patching

    return [n for n in patching.active() if patching.revert_spec(n)]


def _disable(route: str, exc: BaseException) -> None:
    global _disabled_reason
    import logging

    from ._log import log_once

    _disabled_reason = _reason(exc)
    log_once(
        "disabled",
        "sglang_eagle3_ext disabled in this process (%s route): %s",
        route,
        _disabled_reason,
        level=logging.ERROR,
    )


def _reason(exc: BaseException) -> str:
    """The error in one line; an installed package that fails to import is named with its fix."""
    try:  # imported here, guarded: a start-up route never raises
        from .diagnosis import environment_fault

        fault = environment_fault(exc)
    except Exception:  # noqa: BLE001
        fault = None
    return fault or f"{type(exc).__name__}: {exc}"


def _apply_module_safely(module) -> None:
    """Post-import hook: patch what targets this module; never raise into SGLang's import."""
    if _disabled_reason is not None:
        return
    try:
        from . import patching
        from .versions import check_supported

        check_supported()
        for spec in patching.selected(module=module.__name__):
            patching.apply_spec(spec)
    except Exception as e:  # noqa: BLE001 - start-up route: log and disable
        _disable("post-import hook", e)


def startup() -> None:
    """Called by the .pth when SGLANG_EAGLE3_EXT=1: register post-import hooks, import nothing heavy."""
    global _hooks_registered
    if _hooks_registered:
        return
    try:
        import wrapt

        for mod in dict.fromkeys(s.module for s in PATCHES):
            wrapt.register_post_import_hook(_apply_module_safely, mod)
        _hooks_registered = True
    except Exception as e:  # noqa: BLE001
        _disable(".pth start-up", e)


def plugin_entry() -> None:
    """`sglang.srt.plugins` entry point (0.5.14+): same hooks as the .pth, opt-in by the same variable."""
    from . import envs

    if _disabled_reason is not None:  # the .pth route already refused this process (and said so)
        return
    try:
        on = envs.get(ENV_ENABLE)
    except envs.EnvError as e:  # start-up route: one line, package off
        _disable("plugin entry point", e)
        return
    if on:
        startup()


def disabled_reason() -> str | None:
    return _disabled_reason
