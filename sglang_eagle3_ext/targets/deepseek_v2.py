"""Patches of sglang.srt.*.deepseek_v2 (placeholder: pass-through until implemented)."""


def explicit_capture_layers(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


def enable_dump_capture(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)
