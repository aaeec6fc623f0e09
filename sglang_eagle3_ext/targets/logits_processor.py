"""Patches of sglang.srt.*.logits_processor (placeholder: pass-through until implemented)."""


def dump_prefill(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)
