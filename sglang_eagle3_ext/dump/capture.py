"""The server side of the dump: switch aux capture on for the target and hand each pure-EXTEND
batch's states to the writer.

Where the data comes from (0.5.10 .. 0.5.23; signatures read from each release):
- aux states: `LogitsProcessor.forward(input_ids, hidden_states, lm_head, logits_metadata,
  aux_hidden_states, ...)`, arg 4: a list of K [T, H] (<= 0.5.16) or one packed [T, K*H] (0.5.18+);
  produced by DeepseekV2Model's loop at `layers_to_capture` (loop index i = input of layer i = HF i).
- final post-norm: arg 1 `hidden_states` (DeepseekV2Model applies self.norm before returning).
- final pre-norm: a forward hook on `model.model.norm` (called as norm(x, residual) -> (normed,
  x + residual), or norm(x) -> normed with x the pre-norm state); the loop cannot capture index n.
- tokens / layout: arg 3 `logits_metadata` is the ForwardBatch: forward_mode, input_ids (always read
  from here: Kimi-K2.5 passes input_ids=None), rids, extend_prefix_lens_cpu, extend_seq_lens_cpu,
  orig_seq_lens (full prompt length, device tensor: read on the writer thread after the copy event).
All ranks capture identically (the capture path may communicate); only attention-TP rank 0 of each
DP group writes.
"""
from __future__ import annotations

import contextlib
import logging
import os
import weakref

from .._log import log_once, logger
from .config import NODUMP_RID_PREFIX, CONVENTION, DumpConfig, DumpConfigError, from_env
from .manifest import sanitize_id
from .ranks import _ranks, is_writer

ATTR = "_sge3_dump_target"            # on the target's LogitsProcessor instance
TARGET_CLASSES = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"})
# Not targets: MTP/NextN and EAGLE drafts built on the same classes.

_writer = None                         # one per process (one DP group's attention-TP rank 0)


def _server_args():
    from ..draft.context import server_args   # the one lookup (with the fallback across releases)

    return server_args()


def build_meta(model, cfg: DumpConfig, layers: list[int], ranks: dict) -> dict:
    from .. import __version__
    from ..versions import installed_version

    config = model.config
    sa = _server_args()
    dtype = None
    try:
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    except Exception:  # noqa: BLE001
        pass
    return {
        "format": "sge3_dump", "format_version": 1,
        "layer_indices_hf": list(layers), "layer_convention": CONVENTION,
        "final": cfg.final,
        "final_states": {"final_prenorm": "output of the last decoder layer before model.norm "
                                          "(speculators' last hidden_states slot)",
                         "final_postnorm": "after model.norm = HF hidden_states[n] (SpecForge hidden_state)"},
        "hidden_size": int(config.hidden_size), "num_hidden_layers": int(config.num_hidden_layers),
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "model_class": type(model).__name__,
        "model_path": getattr(sa, "model_path", None), "served_model_name": getattr(sa, "served_model_name", None),
        "dtype": dtype or str(getattr(sa, "dtype", "")),
        "sglang_version": installed_version(), "ext_version": __version__,
        "tp_size": ranks["tp_size"], "dp_size": ranks["dp_size"], "attn_tp_size": ranks["attn_tp_size"],
        "pp_size": ranks["pp_size"],
        "chunked_prefill_size": getattr(sa, "chunked_prefill_size", None),
        "disable_radix_cache": getattr(sa, "disable_radix_cache", None),
    }


def make_writer(cfg: DumpConfig, meta: dict, name: str, cuda: bool = False):
    """In this process (io threads) or in a child process (SGLANG_EAGLE3_EXT_DUMP_WRITER=process), with the
    staging ring the capture copies into (writer.staging); cuda: the model runs on a GPU (pinned memory)."""
    if cfg.writer == "process":
        from .writer_process import ProcessDumpWriter

        return ProcessDumpWriter(cfg, meta, name=name, pin=cuda)
    from .writer import DumpWriter

    return DumpWriter(cfg, meta, name=name, staging=_staging_ring(cfg) if cuda else None)


def get_writer():
    return _writer


def attach(model, cfg: DumpConfig | None = None) -> "DumpTarget | None":
    """Turn capture on for `model` (called right after its __init__) and start this process's writer.
    Raises DumpConfigError/DumpStartupError; the patch wrapper logs and disables."""
    global _writer
    if type(model).__name__ not in TARGET_CLASSES:
        return None
    cfg = cfg or from_env()
    if cfg is None:
        return None
    from .prefill_graphs import check as refuse_prefill_graphs   # start-up error where prefill runs in a graph
    refuse_prefill_graphs(_server_args())
    n = int(model.config.num_hidden_layers)
    from . import serving_mode      # EAGLE-3 on: the draft's layers (dump while serving, issue 20)
    cfg = serving_mode.config_for_target(cfg, n, _server_args())
    layers = cfg.resolve_layers(n)
    ranks = _ranks()
    if ranks["pp_rank"] != ranks["pp_size"] - 1:
        log_once("dump.pp", "dump: pipeline rank %d is not the last: no capture here", ranks["pp_rank"])
        return None
    # Set the two attributes ourselves: set_eagle3_layers_to_capture adds +1 by a release-specific rule.
    model.capture_aux_hidden_states = True
    model.model.layers_to_capture = list(layers)
    writes = is_writer(ranks)
    if ranks["attn_tp_rank"] is None:
        logger.error("dump: could not read this process's attention-TP rank (SGLang's parallel state): NOT writing "
                     "from it (only a rank known to be 0 writes; else every rank would write the same samples)")
    if writes and _writer is None:
        meta = build_meta(model, cfg, layers, ranks)
        first = next(model.parameters(), None)
        _writer = make_writer(cfg, meta, name=f"dp{ranks['dp_rank']}", cuda=first is not None and first.is_cuda)
        sa = _server_args()
        if sa is not None and not getattr(sa, "disable_radix_cache", False):
            log_once("dump.radix", "dump: the radix cache is on: requests whose prompt head is cached are refused "
                     "(launch with --disable-radix-cache to dump every request)", level=logging.WARNING)
    target = DumpTarget(model, cfg, layers, _writer if writes else None)
    setattr(model.logits_processor, ATTR, target)
    serving_mode.install(target, model, _server_args())   # sampling rate; EAGLE-3: verify capture
    logger.info("dump: capturing HF hidden_states %s + final (%s) of %s; %s", layers, cfg.final,
                type(model).__name__, f"writing to {cfg.dump_dir}" if writes else "not the writer rank")
    return target


def _arg(args, kwargs, i: int, name: str):
    if len(args) > i:
        return args[i]
    return kwargs.get(name)


def _staging_ring(cfg: DumpConfig):
    """The pinned staging buffer (staging.py) of a CUDA model, allocated at model init, before any CUDA
    graph capture and before serving. None when pinning fails (per-request pinned allocations then).
    The writer process brings its own, shared with it (pinned on a CUDA model)."""
    import time

    try:
        from .staging import PinnedRing

        t0 = time.monotonic()
        # PyTorch's pinned allocator rounds up to a power of two: round down instead, so the pinned
        # memory never exceeds the budget (what does not fit falls back to per-batch allocations)
        ring = PinnedRing(1 << (cfg.max_pending_bytes.bit_length() - 1))
    except Exception as e:  # noqa: BLE001 - slower, still correct
        log_once("dump.ring", "dump: could not pin a %d MB staging buffer (%s: %s): each batch allocates its own "
                 "pinned memory (slower); lower SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB", cfg.max_pending_bytes >> 20,
                 type(e).__name__, e, level=logging.WARNING)
        return None
    log_once("dump.ring", "dump: pinned a %d MB host staging buffer for the device->host copies in %.1f s "
             "(SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB; allocated once instead of per request)",
             ring.capacity >> 20, time.monotonic() - t0)
    return ring


class DumpTarget:
    """Per-target-model state: the configured layers, the pre-norm stash, the writer (None off rank 0)."""

    def __init__(self, model, cfg: DumpConfig, layers: list[int], writer):
        self.model_ref = weakref.ref(model)
        self.cfg, self.layers, self.writer = cfg, list(layers), writer
        self.hidden = int(model.config.hidden_size)
        self.disabled: str | None = None
        self._prenorm = None
        self._norm_sent = False
        self._copy_stream = None
        self.ring = writer.staging if writer is not None else None
        self.norm = getattr(model.model, "norm", None)
        if cfg.want_prenorm:
            if self.norm is None:
                raise DumpConfigError("dump: model.model.norm not found; set SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm")
            self.norm.register_forward_hook(self._stash_prenorm)

    # forward hook on the final norm: keep a reference (no copy) to the pre-norm state of this forward
    def _stash_prenorm(self, module, inputs, output):
        if isinstance(output, tuple) and len(output) >= 2 and len(inputs) >= 2 and inputs[1] is not None:
            self._prenorm = output[1]          # fused add-norm returns (normed, x + residual)
        elif inputs:
            self._prenorm = inputs[0]

    def refuse(self, key: str, msg: str, *a) -> None:
        log_once(f"dump.skip.{key}", "dump: skipping batches: " + msg, *a, level=logging.WARNING)

    def on_logits(self, args, kwargs) -> None:
        pre, self._prenorm = self._prenorm, None
        w = self.writer
        if w is None or not w.accepting or self.disabled:
            return
        fb = _arg(args, kwargs, 3, "logits_metadata")
        vc = getattr(self, "verify", None)   # dump while serving: TARGET_VERIFY final states (verify_capture.py)
        if vc is not None and vc.on_logits(fb, pre, _arg(args, kwargs, 1, "hidden_states")):
            return
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        if getattr(fb, "forward_mode", None) != ForwardMode.EXTEND:   # not verify/mixed/draft/decode
            return
        import torch

        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return
        rids = getattr(fb, "rids", None)
        ext = getattr(fb, "extend_seq_lens_cpu", None)
        pfx = getattr(fb, "extend_prefix_lens_cpu", None)
        if rids is None or ext is None or pfx is None:
            return self.refuse("fields", "ForwardBatch has no rids/extend_seq_lens_cpu/extend_prefix_lens_cpu")
        if not any(not r.startswith(NODUMP_RID_PREFIX) and not w.is_done(sanitize_id(r)) for r in rids):
            return
        model = self.model_ref()
        if model is None or list(model.model.layers_to_capture) != self.layers \
                or not model.capture_aux_hidden_states:
            return self.refuse("layers", "the target's layers_to_capture changed to %s (speculative decoding "
                               "set its own?); configured %s", getattr(model.model, "layers_to_capture", None)
                               if model else None, self.layers)
        T = int(sum(ext))
        ids = getattr(fb, "input_ids", None)
        hidden = _arg(args, kwargs, 1, "hidden_states")
        aux = _arg(args, kwargs, 4, "aux_hidden_states")
        orig = getattr(fb, "orig_seq_lens", None)
        K, H = len(self.layers), self.hidden
        if orig is None:
            return self.refuse("orig", "ForwardBatch.orig_seq_lens is missing: cannot tell when a chunked prompt "
                               "is complete in this release")
        if ids is None or ids.shape[0] < T or hidden is None or hidden.shape[0] < T:
            return self.refuse("rows", "batch rows (ids %s, hidden %s) < %d extend tokens (scattered/padded "
                               "layout?)", None if ids is None else tuple(ids.shape),
                               None if hidden is None else tuple(hidden.shape), T)
        if aux is None:
            return self.refuse("aux", "no aux hidden states reached the logits processor")
        if isinstance(aux, torch.Tensor):
            layout = "packed"
            if aux.dim() != 2 or aux.shape[0] < T or aux.shape[1] != K * H:
                return self.refuse("auxshape", "packed aux shape %s, expected [>=%d, %d]", tuple(aux.shape), T, K * H)
        else:
            layout = "list"
            aux = list(aux)
            if len(aux) != K or any(a.shape[0] < T or a.shape[-1] != H for a in aux):
                return self.refuse("auxshape", "aux list of %d x %s, expected %d x [>=%d, %d]", len(aux),
                                   [tuple(a.shape) for a in aux[:2]], K, T, H)
        if self.cfg.want_prenorm and (pre is None or pre.shape[0] < T):
            return self.refuse("prenorm", "the final norm's hook did not see this forward (compiled/graph "
                               "prefill?): disable prefill CUDA graphs or set SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm")
        self._copy_and_submit(w, fb, rids, pfx, ext, orig, ids, aux, layout, pre, hidden, T, K, H)

    def _side_stream(self, device):
        if not self.cfg.copy_stream:
            return None
        if self._copy_stream is None:
            import torch

            self._copy_stream = torch.cuda.Stream(device=device)
        return self._copy_stream

    def _copy_and_submit(self, w, fb, rids, pfx, ext, orig, ids, aux, layout, pre, hidden, T, K, H) -> None:
        import torch

        from .assemble import ChunkBatch

        bs = len(rids)
        item = hidden.element_size()
        nbytes = T * ids.element_size() + T * K * H * item + bs * 8
        nbytes += T * H * item * (int(self.cfg.want_prenorm) + int(self.cfg.want_postnorm))
        if not w.reserve(nbytes):   # backpressure: may block this (forward) thread, never drops; False: stalled
            return
        cuda = hidden.is_cuda
        region = None
        try:
            # host destinations: views of one ring region when it has room, else pinned allocations
            srcs = {"ids": ids[:T], "aux": aux[:T] if layout == "packed" else None,
                    "pre": pre[:T] if self.cfg.want_prenorm else None,
                    "post": hidden[:T] if self.cfg.want_postnorm else None,
                    "orig": orig[:bs] if hasattr(orig, "shape") else None}
            # NaN/Inf flags per row, on the GPU: the io threads then need no pass over the bytes (each torch
            # call of theirs is a GIL hand-off with this thread). Not on a CPU model (a full pass on this
            # thread), nor for the writer process, whose checks share no GIL with us.
            if cuda and not w.checks_finite_off_gil:
                states = [a[:T] for a in aux] if layout == "list" else [srcs["aux"]]
                srcs["ok"] = _rows_finite(states + [srcs[k] for k in ("pre", "post") if srcs[k] is not None])
            specs = {k: (tuple(t.shape), t.dtype) for k, t in srcs.items() if t is not None}
            if layout == "list":
                specs["aux"] = ((K, T, H), aux[0].dtype)
            dst, region = self._host_buffers(specs, cuda)
            side = self._side_stream(hidden.device) if cuda else None
            if side is not None:  # the copies start once the compute stream has produced the states
                side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():

                def copy_into(h, t):
                    if side is not None and t.is_cuda:  # the caching allocator must not give t's memory
                        t.record_stream(side)            # to the next forward before this copy read it
                    h.copy_(t, non_blocking=cuda)
                    return h

                for k, t in srcs.items():
                    if t is not None:
                        copy_into(dst[k], t)
                if layout == "list":
                    for k, a in enumerate(aux):
                        copy_into(dst["aux"][k], a[:T])
                norm = None
                if self.cfg.want_prenorm and not self._norm_sent and self.norm is not None:
                    wt = self.norm.weight.data
                    norm = (copy_into(torch.empty(wt.shape, dtype=wt.dtype, device="cpu", pin_memory=cuda), wt),
                            float(getattr(self.norm, "variance_epsilon", getattr(self.norm, "eps", 1e-6))))
                    self._norm_sent = True
                event = None
                if cuda:  # the writer waits on this before reading the host copies
                    event = torch.cuda.Event()
                    event.record()
            orig_h = dst["orig"] if "orig" in dst else list(orig)[:bs]
            batch = ChunkBatch(rids, pfx, ext, orig_h, dst["ids"], dst["aux"], layout, dst.get("pre"),
                               dst.get("post"), event, nbytes, norm, row_ok=dst.get("ok"))
            if region is not None:
                batch.free_host = lambda r=region, ring=self.ring: ring.free(r)
        except BaseException:
            w.unreserve(nbytes)
            if region is not None:
                self.ring.free(region)
            raise
        w.submit(batch)

    def _host_buffers(self, specs: dict, cuda: bool):
        """({name: empty host tensor} for each (shape, dtype), the ring region they live in or None).
        Without ring room, the writer provides (and says so once)."""
        if self.ring is not None:
            from .staging import region_size

            region = self.ring.alloc(region_size(specs.values()))
            if region is not None:
                return dict(zip(specs, self.ring.tensors(region, specs.values()))), region
        return self.writer.host_buffers(specs, cuda), None


def _rows_finite(states):
    """[T] bool: row t of every state is free of NaN/Inf. On CUDA only: a few small reductions on the GPU,
    copied with the states, so the writer's io threads need no full pass over the bytes per sample (each
    such call also waits for the GIL held by the busy scheduler thread). On a CPU model this would be a
    full pass on the forward thread, so there the io threads check instead."""
    import torch

    peaks = [torch.linalg.vector_norm(x, float("inf"), dim=-1) for x in states]   # max |x| per row: NaN/Inf stay
    return torch.stack(peaks).isfinite().all(0)


def dump_prefill_hook(instance, args, kwargs) -> None:
    """Called by targets/logits_processor.py before the original forward; never raises."""
    target = getattr(instance, ATTR, None)
    if target is None:
        return
    try:
        target.on_logits(args, kwargs)
    except Exception as e:  # noqa: BLE001 - serving must go on
        target.disabled = f"{type(e).__name__}: {e}"
        logger.exception("dump: disabled after an error in the prefill hook: %s", target.disabled)


def install_from_init(instance) -> None:
    """Called by targets/deepseek_v2.py after DeepseekV2ForCausalLM.__init__.

    The user asked for a dump: a bad configuration (missing/unwritable dir, layer out of range, a
    dump dir made with other settings) stops the server at start-up with the fix in the message,
    rather than serving for hours and writing nothing. Anything unexpected only disables dumping.
    """
    from .config import DumpConfigError
    from .writer import DumpStartupError

    try:
        attach(instance)
    except (DumpConfigError, DumpStartupError) as e:
        raise DumpStartupError(f"sglang_eagle3_ext dump: {e}") from e
    except Exception as e:  # noqa: BLE001 - not a user error: keep serving without the dump
        logger.error("dump: DISABLED in this process (pid %d): %s: %s", os.getpid(), type(e).__name__, e)
