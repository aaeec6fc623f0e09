"""Drafts named by a Hugging Face hub id (`--speculative-draft-model-path org/name`): checked from the local
HF cache only (huggingface_hub, no network), or said plainly not to be checked, with how to check them."""
from __future__ import annotations

import os
import re
from pathlib import Path

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(s: str) -> bool:
    return bool(_HUB_ID.match(s)) and not Path(os.path.expanduser(s)).exists()


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot dir holding the draft's config.json, or None (never downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        p = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - malformed id or cache: treated as not cached
        return None
    return Path(p).parent if isinstance(p, str) else None


def how_to_check(repo_id: str) -> str:
    return (f"download it first (huggingface-cli download {repo_id}), then "
            f"python -m sglang_eagle3_ext.check {repo_id}")


def resolve(draft: str) -> tuple[Path | None, str | None, str | None]:
    """(local dir or None, hub id or None, note): a local dir as is; a hub id through the local cache."""
    local = Path(os.path.expanduser(str(draft)))
    if local.is_dir():
        return local, None, None
    if not looks_like_hub_id(str(draft)):
        return None, None, f"{draft}: no such directory (and not a hub id org/name)"
    snap = cached_snapshot(str(draft))
    if snap is None:
        return None, str(draft), (f"{draft} is no local directory, and as a hub id it is not in the local Hugging "
                                  f"Face cache: NOT checked — {how_to_check(str(draft))}")
    return snap, str(draft), f"hub id {draft}: checked from the local cache {snap}"
