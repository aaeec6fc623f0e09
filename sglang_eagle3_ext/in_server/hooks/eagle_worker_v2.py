"""Patches of sglang.srt.speculative.eagle_worker_v2 (0.5.14+): dump while serving EAGLE-3."""


def check_serving_dump(wrapped, instance, args, kwargs):
    """EAGLEWorkerV2.__init__: once the target worker exists (its capture layers set by the draft, its graphs
    captured), a dumping target must capture exactly the dump's layers: else a start-up error naming both."""
    result = wrapped(*args, **kwargs)
    if instance is not None:
        from ..dump.serving_mode import check_worker

        check_worker(instance)
    return result


def dump_verify(wrapped, instance, args, kwargs):
    """EAGLEWorkerV2.verify(batch, ...): after the target's verify forward and sampling, copy the states of
    the rows that ended up in the output (accepted drafts + bonus) of the dumped requests to the writer."""
    from ..dump.verify_capture import get_active, verify_hook

    if get_active() is None:
        return wrapped(*args, **kwargs)
    return verify_hook(wrapped, args, kwargs)
