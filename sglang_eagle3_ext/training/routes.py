"""The route of each draft layout: the folder training/<ROUTE>/ its declaration names (draft/arch: ROUTE), with two
fixed roles, imported when used (a route may import torch at import time):

    train.py   `train(options, output rule) -> summary`: the run
    plan.py    `step(options, target config, K, T, device, world, lengths=None) -> sizes`: `train --dry-run`'s
               arithmetic (training/plan.py adds the run's totals)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ..draft import arch as layouts


class _Routes(Mapping):
    """draft layout (--draft-arch) -> the folder of training/ that trains it, read live from the layout registry."""

    def __getitem__(self, name: str) -> str:
        if name not in layouts.LAYOUTS:
            raise KeyError(name)
        return layouts.get(name).ROUTE

    def __iter__(self):
        return iter(layouts.names())

    def __len__(self) -> int:
        return len(layouts.LAYOUTS)


ROUTES = _Routes()


def train_entry(layout):
    """The route's run: training/<ROUTE>/train.py's `train`."""
    return importlib.import_module(f".{layout.ROUTE}.train", __package__).train


def plan_step(layout):
    """The route's `train --dry-run` arithmetic: training/<ROUTE>/plan.py's `step`."""
    return importlib.import_module(f".{layout.ROUTE}.plan", __package__).step
