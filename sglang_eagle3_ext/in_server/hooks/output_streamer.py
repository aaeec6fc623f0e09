"""Patches of sglang.srt.managers.scheduler_components.output_streamer (0.5.14+): requests that ended."""


def dump_request_end(wrapped, instance, args, kwargs):
    """SchedulerOutputStreamer.stream_output(reqs, ...): every request that finished or was aborted passes
    here once its output is final; dump while serving then writes (or forgets) its prompt+response."""
    result = wrapped(*args, **kwargs)
    from ..dump.verify_capture import get_active, streamed_hook

    if get_active() is not None:
        from ._bind import bind

        reqs = bind(wrapped, args, kwargs).get("reqs")
        if reqs:
            streamed_hook(reqs)
    return result
