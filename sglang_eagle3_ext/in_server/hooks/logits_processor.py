"""Patches of sglang.srt.layers.logits_processor."""


def dump_prefill(wrapped, instance, args, kwargs):
    """Hand the aux + final states of pure-EXTEND batches of a dump target to the writer, then run the
    original. Only LogitsProcessors that dump.start.attach tagged do anything (not drafts, not MTP)."""
    if instance is not None and instance.__dict__.get("_sge3_dump_target") is not None:
        from ..dump.capture import dump_prefill_hook

        dump_prefill_hook(instance, wrapped, args, kwargs)
    return wrapped(*args, **kwargs)
