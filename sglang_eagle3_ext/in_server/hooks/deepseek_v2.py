"""Wrappers for sglang.srt.models.deepseek_v2 (the target): exact aux-capture layers for a draft, and the
dump's capture switch; each is a thin entry that imports its implementation on first call."""


def explicit_capture_layers(wrapped, instance, args, kwargs):
    """set_eagle3_layers_to_capture: capture exactly the HF indices the draft records (see in_server/draft/capture_layers.py)."""
    from ..draft.capture_layers import set_capture_layers

    return set_capture_layers(wrapped, instance, args, kwargs)


def enable_dump_capture(wrapped, instance, args, kwargs):
    """After DeepseekV2ForCausalLM.__init__ (so before weights load and any CUDA-graph capture): set
    layers_to_capture = the dump's HF indices and capture_aux_hidden_states on the target, start the
    writer. Subclasses that are drafts (NextN/MTP) are skipped by exact class name; errors are logged."""
    result = wrapped(*args, **kwargs)
    if instance is not None:
        from ..dump.start import install_from_init

        install_from_init(instance)
    return result
