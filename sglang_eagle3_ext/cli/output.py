"""What a command shows by default: its own lines and progress, not the logs, warnings and progress bars of
the libraries it drives (speculators, transformers, datasets, torch). `--verbose` shows those too; errors of
any logger are always shown."""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import warnings

from .. import envs

OURS = "sglang_eagle3_ext"
# libraries whose own progress bars are switched off: module, (is it on?, off, on)
_BARS = {
    "transformers.utils.logging": ("is_progress_bar_enabled", "disable_progress_bar", "enable_progress_bar"),
    "datasets.utils.logging": ("is_progress_bar_enabled", "disable_progress_bar", "enable_progress_bar"),
}
_LOGURU_NAMES = ("speculators",)  # libraries logging through loguru


class _OursOrErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.startswith(OURS) or record.levelno >= logging.ERROR


@contextlib.contextmanager
def library_output(verbose: bool, bars: bool = False):
    """Within: unless `verbose`, other loggers reach the terminal only at ERROR, Python warnings are not shown,
    loguru messages of _LOGURU_NAMES are off and (bars=True) the progress bars of _BARS (imported for that).
    A library's `logging.basicConfig` inside finds the root handler installed here and leaves it alone.
    Everything is put back on exit."""
    if verbose:
        yield
        return
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_OursOrErrors())
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s %(message)s"))
    saved_handlers, ours = root.handlers[:], logging.getLogger(OURS)
    root.handlers = [handler]
    undo = [_loguru_off(), *(_bars_off() if bars else [])]
    if ours.level == logging.NOTSET:  # our own INFO lines (automatic decisions) stay visible
        ours.setLevel(logging.INFO)
        undo.append(lambda: ours.setLevel(logging.NOTSET))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.handlers = saved_handlers
        for fn in undo:
            if fn is not None:
                fn()


def _loguru_off():
    """loguru comes with speculators (never imported here): loaded already, its messages of _LOGURU_NAMES are
    switched off; not yet, its default sink will take ERROR and up (LOGURU_LEVEL, read when it loads)."""

    mod = sys.modules.get("loguru")
    if mod is not None:
        for name in _LOGURU_NAMES:
            mod.logger.disable(name)
        return lambda: [mod.logger.enable(name) for name in _LOGURU_NAMES]
    return envs.override_external("LOGURU_LEVEL", "ERROR")


def _bars_off() -> list:
    undo = []
    for mod, (is_on, off, on) in _BARS.items():
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        if getattr(m, is_on)():
            getattr(m, off)()
            undo.append(getattr(m, on))
    return undo
