"""The formats a dump exports to, by name: `dump export --to NAME` offers exactly these.

A new format is one module here with a function `(dump_dir, out, order=None, loss_masks=None, workers=1,
progress=False) -> samples exported`, built on ..export (export_into, read_checked, loss_mask, map_samples,
write_index), plus its line in FORMATS.
"""

from __future__ import annotations

import importlib
from typing import Callable

# name -> "module:function"; a module starting with "." is one of this package. Imported only when used.
FORMATS = {"speculators": ".speculators:export_speculators", "specforge": ".specforge:export_specforge"}


def names() -> tuple[str, ...]:
    return tuple(FORMATS)


def get(name: str) -> Callable[..., int]:
    """The export function of format `name`; ExportError naming the formats when there is no such format."""
    spec = FORMATS.get(name)
    if spec is None:
        from ..export import ExportError

        raise ExportError(f"no export format {name!r}: choose one of {', '.join(FORMATS)}")
    module, function = spec.split(":")
    return getattr(importlib.import_module(module, __name__), function)
