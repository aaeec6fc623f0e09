"""The server side of the dump: hand each pure-EXTEND batch's states to the writer (start.py switched aux
capture on for the target and made the writer; copy.py does the device->host copies).

Where the data comes from (0.5.10 .. 0.5.23; signatures read from each release):
- aux states: `LogitsProcessor.forward(input_ids, hidden_states, lm_head, logits_metadata,
  aux_hidden_states, ...)` (arguments bound by name): a list of K [T, H] (<= 0.5.16) or one packed [T, K*H] (0.5.18+);
  produced by DeepseekV2Model's loop at `layers_to_capture` (loop index i = input of layer i = HF i).
- final post-norm: `hidden_states` (DeepseekV2Model applies self.norm before returning).
- final pre-norm: a forward hook on `model.model.norm` (called as norm(x, residual) -> (normed,
  x + residual), or norm(x) -> normed with x the pre-norm state); the loop cannot capture index n.
- tokens / layout: `logits_metadata` is the ForwardBatch: forward_mode, input_ids (always read
  from here: Kimi-K2.5 passes input_ids=None), rids, extend_prefix_lens_cpu, extend_seq_lens_cpu,
  orig_seq_lens (full prompt length, device tensor: read on the writer thread after the copy event).
All ranks capture identically (the capture path may communicate); only attention-TP rank 0 of each
DP group writes.
"""

from __future__ import annotations

import collections
import logging
import weakref

from ..._log import log_once, logger
from ...dump.config import NODUMP_RID_PREFIX, DumpConfig, DumpConfigError
from ...dump.manifest import sanitize_id
from ...patching import arg
from .assemble import ChunkBatch
from .copy import CopyRequest, HostCopier, copy_prefill

ATTR = "_sge3_dump_target"  # on the target's LogitsProcessor instance
TARGET_CLASSES = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"})
# Not targets: MTP/NextN and EAGLE drafts built on the same classes.


class DumpTarget:
    """Per-target-model state: the configured layers, the pre-norm stash, the writer (None off rank 0)."""

    def __init__(self, model, cfg: DumpConfig, layers: list[int], writer):
        self.model_ref = weakref.ref(model)
        self.cfg, self.layers, self.writer = cfg, list(layers), writer
        self.hidden = int(model.config.hidden_size)
        self.disabled: str | None = None
        self._prenorm = None
        self._norm_sent = False
        self.copier = HostCopier(cfg, writer)
        self.norm = getattr(model.model, "norm", None)
        if cfg.want_prenorm:
            if self.norm is None:
                raise DumpConfigError("dump: model.model.norm not found; set SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm")
            self.norm.register_forward_hook(self._stash_prenorm)

    # forward hook on the final norm: keep a reference (no copy) to the pre-norm state of this forward
    def _stash_prenorm(self, module, inputs, output):
        if isinstance(output, tuple) and len(output) >= 2 and len(inputs) >= 2 and inputs[1] is not None:
            self._prenorm = output[1]  # fused add-norm returns (normed, x + residual)
        elif inputs:
            self._prenorm = inputs[0]

    @staticmethod
    def _send_skips(w, rids, mm, pfx, ext) -> None:
        """A batch whose only dumpable requests carry multimodal inputs: nothing to copy, but the writer counts
        them (a batch of layout only; prompt lengths are this chunk's ends: no device read here)."""

        w.submit(
            ChunkBatch(rids, pfx, ext, [int(p) + int(n) for p, n in zip(pfx, ext)], None, None, "list", multimodal=mm)
        )

    def refuse(self, key: str, msg: str, *a) -> None:
        log_once(f"dump.skip.{key}", "dump: skipping batches: " + msg, *a, level=logging.WARNING)

    def on_logits(self, wrapped, args, kwargs) -> None:
        """LogitsProcessor.forward(input_ids, hidden_states, lm_head, logits_metadata, aux_hidden_states, ...)."""
        pre, self._prenorm = self._prenorm, None
        w = self.writer
        if w is None or not w.accepting or self.disabled:
            return
        fb, hidden = arg(wrapped, args, kwargs, "logits_metadata"), arg(wrapped, args, kwargs, "hidden_states")
        vc = getattr(self, "verify", None)  # dump while serving: TARGET_VERIFY final states (verify_capture.py)
        if vc is not None and vc.on_logits(fb, pre, hidden):
            return
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        if getattr(fb, "forward_mode", None) != ForwardMode.EXTEND:  # not verify/mixed/draft/decode
            return
        import torch

        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return
        rids = getattr(fb, "rids", None)
        ext = getattr(fb, "extend_seq_lens_cpu", None)
        pfx = getattr(fb, "extend_prefix_lens_cpu", None)
        if rids is None or ext is None or pfx is None:
            return self.refuse("fields", "ForwardBatch has no rids/extend_seq_lens_cpu/extend_prefix_lens_cpu")
        mm = multimodal_requests(fb, len(rids))
        if not any(
            not r.startswith(NODUMP_RID_PREFIX) and not (mm and mm[i]) and not w.is_done(sanitize_id(r))
            for i, r in enumerate(rids)
        ):
            if mm and w.accepting:  # counted by the writer once per request (dump status)
                self._send_skips(w, rids, mm, pfx, ext)
            return
        model = self.model_ref()
        if model is None or list(model.model.layers_to_capture) != self.layers or not model.capture_aux_hidden_states:
            return self.refuse(
                "layers",
                "the target's layers_to_capture changed to %s (speculative decoding set its own?); configured %s",
                getattr(model.model, "layers_to_capture", None) if model else None,
                self.layers,
            )
        T = int(sum(ext))
        ids = getattr(fb, "input_ids", None)
        aux = arg(wrapped, args, kwargs, "aux_hidden_states")
        orig = getattr(fb, "orig_seq_lens", None)
        K, H = len(self.layers), self.hidden
        if orig is None:
            return self.refuse(
                "orig",
                "ForwardBatch.orig_seq_lens is missing: cannot tell when a chunked prompt is complete in this release",
            )
        if ids is None or ids.shape[0] < T or hidden is None or hidden.shape[0] < T:
            return self.refuse(
                "rows",
                "batch rows (ids %s, hidden %s) < %d extend tokens (scattered/padded layout?)",
                None if ids is None else tuple(ids.shape),
                None if hidden is None else tuple(hidden.shape),
                T,
            )
        if aux is None:
            return self.refuse("aux", "no aux hidden states reached the logits processor")
        layout, aux = self._aux_layout(aux, T, K, H, torch.Tensor)
        if layout is None:
            return
        if self.cfg.want_prenorm and (pre is None or pre.shape[0] < T):
            return self.refuse(
                "prenorm",
                "the final norm's hook did not see this forward (compiled/graph "
                "prefill?): disable prefill CUDA graphs or set SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm",
            )
        send_norm = self.cfg.want_prenorm and not self._norm_sent and self.norm is not None
        if copy_prefill(
            self.copier,
            w,
            CopyRequest(rids, pfx, ext, orig, ids, aux, layout, pre, hidden, T, K, H, mm),
            norm=self.norm if send_norm else None,
        ):
            self._norm_sent = self._norm_sent or send_norm

    def _aux_layout(self, aux, T: int, K: int, H: int, tensor_type) -> tuple[str | None, object]:
        """("packed" [>=T, K*H] | "list" of K x [>=T, H], aux); (None, aux) after refusing any other shape.
        `tensor_type` is torch.Tensor, passed in by the caller that already imported torch."""
        if isinstance(aux, tensor_type):
            if aux.dim() != 2 or aux.shape[0] < T or aux.shape[1] != K * H:
                self.refuse("auxshape", "packed aux shape %s, expected [>=%d, %d]", tuple(aux.shape), T, K * H)
                return None, aux
            return "packed", aux
        aux = list(aux)
        if len(aux) != K or any(a.shape[0] < T or a.shape[-1] != H for a in aux):
            self.refuse(
                "auxshape",
                "aux list of %d x %s, expected %d x [>=%d, %d]",
                len(aux),
                [tuple(a.shape) for a in aux[:2]],
                K,
                T,
                H,
            )
            return None, aux
        return "list", aux


# request id -> None for requests seen carrying multimodal inputs when their batch was built (bounded: the
# newest ids; a request's chunks arrive within a few batches of each other)
_MULTIMODAL_RIDS: "collections.OrderedDict[str, None]" = collections.OrderedDict()
_MULTIMODAL_RIDS_MAX = 65536


def note_multimodal(rids, mm_inputs) -> None:
    """Called when a ForwardBatch is built (in_server/hooks/forward_batch_info.py): remember its multimodal requests
    by id, which survives the copies SGLang makes of the batch before the model runs."""
    if rids is None or len(rids) != len(mm_inputs):
        return
    seen = False
    for rid, x in zip(rids, mm_inputs):
        if carries_multimodal(x):
            _MULTIMODAL_RIDS[rid] = None
            _MULTIMODAL_RIDS.move_to_end(rid)
            seen = True
    while len(_MULTIMODAL_RIDS) > _MULTIMODAL_RIDS_MAX:
        _MULTIMODAL_RIDS.popitem(last=False)
    if seen:
        log_once(
            "dump-multimodal",
            "dump: requests with images/audio/video are served and counted "
            "(skipped_multimodal), never dumped: their positions hold pad values, not token ids",
        )


def multimodal_requests(fb, bs: int) -> list[bool] | None:
    """Per request of the batch: it carries images/audio/video. SGLang replaced their positions in input_ids by
    pad values, then clamped those into the vocab, and the states there are the vision tower's: never a training
    sample. `mm_inputs` while the batch still holds it; else the ids noted when the batch was built; a batch
    with multimodal embeddings (`mm_input_embeds`) whose requests cannot be told apart counts as all
    multimodal. None when no request does."""
    mm = getattr(fb, "mm_inputs", None)
    rids = getattr(fb, "rids", None)
    if mm and len(mm) == bs:
        flags = [carries_multimodal(x) for x in mm]
    elif rids is not None and len(rids) == bs:
        flags = [r in _MULTIMODAL_RIDS for r in rids]
    else:
        flags = [bool(mm)] * bs
    if not any(flags) and getattr(fb, "mm_input_embeds", None) is not None:  # no record of which: all
        flags = [True] * bs
    return flags if any(flags) else None


def carries_multimodal(mm_inputs) -> bool:
    """A request's MultimodalInputs (Req.multimodal_inputs, one entry of ForwardBatch.mm_inputs) holds items."""
    return mm_inputs is not None and bool(getattr(mm_inputs, "mm_items", True))


def dump_prefill_hook(instance, wrapped, args, kwargs) -> None:
    """Called by in_server/hooks/logits_processor.py before the original forward; never raises."""
    target = getattr(instance, ATTR, None)
    if target is None:
        return
    try:
        target.on_logits(wrapped, args, kwargs)
    except Exception as e:  # noqa: BLE001 - serving must go on
        target.disabled = f"{type(e).__name__}: {e}"
        logger.exception("dump: disabled after an error in the prefill hook: %s", target.disabled)
