"""The built-in models a launch preset names (`builtin:NAME`): made on first use in the cache, told apart by
their folder's name (tiny/deepseek_v3.TARGETS, tiny/kimi_k25.KIMI_TARGETS)."""

from __future__ import annotations

import os
from pathlib import Path

from .deepseek_v3 import TARGETS, ensure_target, ensure_tiny_target
from .kimi_k25 import KIMI_TARGETS, ensure_kimi_target


def ensure_builtin(path: str | os.PathLike) -> Path:
    """Make the built-in model a preset names, told apart by its cache folder's name."""
    name = Path(path).name
    if name in KIMI_TARGETS:
        return ensure_kimi_target(name, path)
    return ensure_target(name, path) if name in TARGETS else ensure_tiny_target(path)
