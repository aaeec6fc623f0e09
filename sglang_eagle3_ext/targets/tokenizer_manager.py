"""Wrapper for sglang.srt.managers.tokenizer_manager (capability DRAFT_SWAP): after a successful update from disk
SGLang names the served model after the path it loaded (`served_model_name`, `model_path`, the recorded load
format). A draft swap (draft/swap.py) loads a draft, not the model: the served model keeps its name and path."""
from __future__ import annotations

from ._bind import arg


def keep_model_path(wrapped, instance, args, kwargs):
    """TokenizerManager._update_model_path_info(model_path, load_format)."""
    from ..draft.swap import LOAD_FORMAT

    if arg(wrapped, args, kwargs, "load_format") != LOAD_FORMAT:
        return wrapped(*args, **kwargs)
    from .._log import log_once

    log_once("swap-keeps-model-path", "EAGLE-3 draft swapped in (%s): the served model keeps its name and path",
             arg(wrapped, args, kwargs, "model_path"))
    return None
