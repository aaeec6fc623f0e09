"""Patches of sglang.srt.model_executor.forward_batch_info."""

MULTIMODAL_ATTR = "_sge3_multimodal"


def record_multimodal(wrapped, instance, args, kwargs):
    """ForwardBatch.init_new(batch, model_runner): remember which requests carry images/audio/video while
    `mm_inputs` still says so. The multimodal embedding step clears `mm_inputs` and clamps the pad values in
    `input_ids` in place before the logits processor runs, so by dump time neither tells them apart."""
    fb = wrapped(*args, **kwargs)
    mm = getattr(fb, "mm_inputs", None)
    if mm:
        from ..dump.capture import carries_multimodal

        setattr(fb, MULTIMODAL_ATTR, [carries_multimodal(x) for x in mm])
    return fb
