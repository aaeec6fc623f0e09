"""Wrapper for sglang.srt.managers.scheduler_components.weight_updater (0.5.14+, capability DRAFT_SWAP): the
scheduler's handler of POST /update_weights_from_disk. A request whose load_format is draft/swap/protocol.LOAD_FORMAT
loads a new EAGLE-3 draft into the draft runners (in_server/draft/swap.py); every other update is SGLang's own, unchanged.

Why this route: SGLang's update sends the target's path to every runner (made for MTP, where target and draft
share a checkpoint), so no request loads another checkpoint into the draft alone. Riding the same request keeps
SGLang's own path to the scheduler (HTTP, the tokenizer manager waiting for the requests in flight, every TP
rank's scheduler between batches): nothing new crosses a process boundary.
"""

from __future__ import annotations

from ._bind import arg


def swap_draft(wrapped, instance, args, kwargs):
    """SchedulerWeightUpdaterManager.update_weights_from_disk(recv_req)."""
    from ...draft.swap.protocol import LOAD_FORMAT

    req = arg(wrapped, args, kwargs, "recv_req")
    if instance is None or getattr(req, "load_format", None) != LOAD_FORMAT:
        return wrapped(*args, **kwargs)
    from ..draft.swap import handle

    return handle(instance, req)
