"""What the running SGLang process knows: server args (API moved across releases), model configs. Read once
per process into startup.StartupContext, which the consumers take."""

from __future__ import annotations

import os
from pathlib import Path

from .._log import logger
from ..boundary import read_json_file
from .hf_cache import local_dir


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

    p = (local_dir(path) or Path(os.path.expanduser(str(path)))) / "config.json"
    try:  # a regular file holding an object: a FIFO would block, a list has no keys to read
        return read_json_file(p, "model config", max_bytes=1 << 24)
    except ValueError as e:  # BadInput, or a path no file can have (a NUL byte)
        logger.debug("no readable config at %s: %s", p, e)
        return None


def language_config(cfg: dict) -> dict:
    """The language model's config: a wrapper's (Kimi-K2.5: `model_type: kimi_k25`) `text_config`, else cfg."""
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
