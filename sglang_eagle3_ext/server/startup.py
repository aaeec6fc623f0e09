"""What this SGLang process was started with, resolved once: the target's and the draft's paths, folders and
configs, read from SGLang's ServerArgs when the first consumer asks (the dump's start-up, the capture-layer
patch, the draft loader: all run while the server starts) and the same object for every later one. The
draft's layer ids are read from `draft_config` by the rules of draft/layers.py."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from . import runtime
from .hf_cache import local_dir

EAGLE3_ALGORITHMS = ("EAGLE3",)


@dataclasses.dataclass(frozen=True)
class StartupContext:
    server_args: Any  # SGLang's ServerArgs; None where none is published (not a server process)
    model_path: str | None  # --model-path as given
    target_dir: Path | None  # its folder here (a hub id: the cached snapshot), None when not found
    target_config: dict | None  # its config.json; None when not readable here
    draft_path: str | None  # --speculative-draft-model-path as given; None: no draft
    draft_dir: Path | None
    draft_config: dict | None

    @classmethod
    def from_server_args(cls, sa) -> "StartupContext":
        model = getattr(sa, "model_path", None) if sa is not None else None
        draft = getattr(sa, "speculative_draft_model_path", None) if sa is not None else None
        return cls(
            server_args=sa,
            model_path=model,
            target_dir=local_dir(model),
            target_config=runtime.read_config(model),
            draft_path=draft,
            draft_dir=local_dir(draft),
            draft_config=runtime.read_config(draft),
        )

    @property
    def eagle3(self) -> bool:
        """The server runs EAGLE-3 speculative decoding (--speculative-algorithm EAGLE3)."""
        algo = getattr(self.server_args, "speculative_algorithm", None)
        return str(algo or "").upper() in EAGLE3_ALGORITHMS


_lock = threading.Lock()
_built: tuple[Any, StartupContext] | None = None  # (the ServerArgs it was built from, the context)


def startup_context() -> StartupContext:
    """This process's context, built from its ServerArgs on first use. A process publishes one ServerArgs; a
    different one (a test publishing another) gets its own context. Not kept while none is published, so that
    an early caller does not pin an empty one."""
    global _built
    sa = runtime.server_args()
    with _lock:
        if _built is not None and _built[0] is sa:
            return _built[1]
        ctx = StartupContext.from_server_args(sa)
        if sa is not None:
            _built = (sa, ctx)
        return ctx
