"""Wrapper for sglang.srt.managers.scheduler (capability DRAFT_SWAP): /get_server_info's internal state of each
scheduler also says which EAGLE-3 draft it serves, what it is built as and which HF indices its target captures
(in_server/draft/swap.state_report). `sglang-eagle3 swap` reads it to check a new draft before sending it; its presence
says the server takes draft swaps (a server without this package would take the request as a target reload)."""

from __future__ import annotations


def report_draft(wrapped, instance, args, kwargs):
    """Scheduler.get_internal_state(recv_req): SGLang's reply, with the draft's entry added."""
    out = wrapped(*args, **kwargs)
    if instance is not None:
        from ..draft.swap import add_state_report

        add_state_report(instance, out)
    return out
