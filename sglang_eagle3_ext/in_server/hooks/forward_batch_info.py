"""Patches of sglang.srt.model_executor.forward_batch_info."""


def record_multimodal(wrapped, instance, args, kwargs):
    """ForwardBatch.init_new(batch, model_runner): remember which requests carry images/audio/video while
    `mm_inputs` still says so. The batch the model sees is a copy (the eager runner's dataclasses.replace),
    whose `mm_inputs` the multimodal embedding step clears, clamping the pad values in `input_ids` into the
    vocab in place, before the logits processor runs: by dump time neither tells the requests apart."""
    fb = wrapped(*args, **kwargs)
    mm = getattr(fb, "mm_inputs", None)
    if mm:
        from ..dump.capture import note_multimodal

        note_multimodal(getattr(fb, "rids", None), mm)
    return fb
