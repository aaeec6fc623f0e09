"""Drafts named by a Hugging Face hub id (`--speculative-draft-model-path org/name`): checked from the local
HF cache only (huggingface_hub, no network), or said plainly not to be checked, with how to check them."""

from __future__ import annotations

import os
from pathlib import Path

from ..server.hf_cache import cached_snapshot, looks_like_hub_id


def how_to_check(repo_id: str) -> str:
    return f"download it first (hf download {repo_id}), then sglang-eagle3 check {repo_id}"


def resolve(draft: str) -> tuple[Path | None, str | None, str | None]:
    """(local dir or None, hub id or None, note): a local dir as is; a hub id through the local cache."""
    local = Path(os.path.expanduser(str(draft)))
    if local.is_dir():
        return local, None, None
    if local.exists():
        return None, None, f"{draft}: is a file, not a draft folder (config.json + *.safetensors); name its folder"
    if not looks_like_hub_id(str(draft)):
        return None, None, f"{draft}: no such directory (and not a hub id org/name)"
    snap = cached_snapshot(str(draft))
    if snap is None:
        return (
            None,
            str(draft),
            (
                f"{draft} is no local directory, and as a hub id it is not in the local Hugging "
                f"Face cache: NOT checked — {how_to_check(str(draft))}"
            ),
        )
    return snap, str(draft), f"hub id {draft}: checked from the local cache {snap}"
