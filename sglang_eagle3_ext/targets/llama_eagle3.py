"""Patches of sglang.srt.*.llama_eagle3 (placeholder: pass-through until implemented)."""


def strict_load_weights(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


def fc_width_guard(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)
