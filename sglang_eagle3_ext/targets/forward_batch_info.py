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

        flags = [carries_multimodal(x) for x in mm]
        setattr(fb, MULTIMODAL_ATTR, flags)
        if any(flags):
            from .._log import log_once

            log_once("dump-multimodal", "dump: requests with images/audio/video are served and counted "
                     "(skipped_multimodal), never dumped: their positions hold pad values, not token ids")
    return fb
