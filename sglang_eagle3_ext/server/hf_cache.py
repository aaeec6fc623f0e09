"""Models named by a Hugging Face hub id (`org/name`): found in the local HF cache only (huggingface_hub, no
network). SGLang downloads a hub id before it builds the model, so a served model's files are there."""

from __future__ import annotations

import os
import re
from pathlib import Path

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(s: str) -> bool:
    return bool(_HUB_ID.match(s)) and not Path(os.path.expanduser(s)).exists()


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot dir holding the model's config.json, or None (never downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        p = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - malformed id or cache: treated as not cached
        return None
    return Path(p).parent if isinstance(p, str) else None


def local_dir(path) -> Path | None:
    """A model's folder here: a local directory as it is, a hub id's cached snapshot, else None."""
    if not path:
        return None
    local = Path(os.path.expanduser(str(path)))
    if local.is_dir():
        return local
    return cached_snapshot(str(path)) if looks_like_hub_id(str(path)) else None
