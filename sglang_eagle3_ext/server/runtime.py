"""What the running SGLang process knows: server args (API moved across releases), model configs."""
from __future__ import annotations

import os
from pathlib import Path

from .._log import logger


def server_args():
    """The process's ServerArgs, or None (never raises)."""
    try:  # runtime context: 0.5.16+ (the only route from 0.5.22)
        from sglang.srt.runtime_context import get_server_args

        sa = get_server_args()
        if sa is not None:
            return sa
    except Exception:  # noqa: BLE001 - absent, or not published yet
        pass
    try:
        from sglang.srt.server_args import get_global_server_args

        return get_global_server_args()
    except Exception:  # noqa: BLE001
        return None


def read_config(path) -> dict | None:
    """config.json (a JSON object) of a local model dir or of a hub id already in the local HF cache (SGLang
    fetched it before building the draft), else None (nothing is fetched here)."""
    if not path:
        return None
    p = Path(os.path.expanduser(str(path))) / "config.json"
    if not p.parent.is_dir():
        from ..draft.hub import cached_snapshot, looks_like_hub_id

        snap = cached_snapshot(str(path)) if looks_like_hub_id(str(path)) else None
        p = snap / "config.json" if snap is not None else p
    from ..boundary import read_json_file

    try:   # a regular file holding an object: a FIFO would block, a list has no keys to read
        return read_json_file(p, "model config", max_bytes=1 << 24)
    except ValueError as e:   # BadInput, or a path no file can have (a NUL byte)
        logger.debug("no readable config at %s: %s", p, e)
        return None


def language_config(cfg: dict) -> dict:
    """The language model's config: a wrapper's (Kimi-K2.5: `model_type: kimi_k25`) `text_config`, else cfg."""
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def draft_dir_and_config() -> tuple[str | None, dict | None]:
    sa = server_args()
    path = getattr(sa, "speculative_draft_model_path", None) if sa is not None else None
    return path, read_config(path)


def target_config() -> dict | None:
    sa = server_args()
    return read_config(getattr(sa, "model_path", None)) if sa is not None else None
