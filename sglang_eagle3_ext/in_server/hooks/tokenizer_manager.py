"""Wrapper for sglang.srt.managers.tokenizer_manager (capability DRAFT_SWAP): after a successful update from disk
SGLang names the served model after the path it loaded (`served_model_name`, `model_path`, the recorded load
format). A draft swap (in_server/draft/swap.py) loads a draft, not the model: the served model keeps its name and path, and
SGLang's record of the draft (`server_args.speculative_draft_model_path`: what /get_server_info shows, what
`eval --url` and a relaunch from the reported arguments read) names the new draft."""

from __future__ import annotations

from ._bind import arg


def keep_model_path(wrapped, instance, args, kwargs):
    """TokenizerManager._update_model_path_info(model_path, load_format)."""
    from ...draft.swap.protocol import LOAD_FORMAT

    if arg(wrapped, args, kwargs, "load_format") != LOAD_FORMAT:
        return wrapped(*args, **kwargs)
    from ..._log import log_once

    path = arg(wrapped, args, kwargs, "model_path")
    log_once("swap-keeps-model-path", "EAGLE-3 draft swapped in (%s): the served model keeps its name and path", path)
    record_draft(getattr(instance, "server_args", None), path)
    return None


def record_draft(server_args, path: str) -> None:
    """server_args.speculative_draft_model_path = path, through ServerArgs.override where the release has it
    (0.5.16+: the one audited mutation point; a bare assignment raises under its strict mode)."""
    from ..._log import logger

    if server_args is None:
        return
    try:
        override = getattr(server_args, "override", None)
        if callable(override):
            override("sglang_eagle3_ext.draft_swap", speculative_draft_model_path=path)
        else:
            server_args.speculative_draft_model_path = path
    except Exception as e:  # noqa: BLE001 - the swap is done; only SGLang's record of it is stale
        logger.warning(
            "EAGLE-3 draft swap: SGLang's record of the draft still names %s (%s: %s); a restart with "
            "--speculative-draft-model-path %s serves the new one",
            getattr(server_args, "speculative_draft_model_path", None),
            type(e).__name__,
            e,
            path,
        )
