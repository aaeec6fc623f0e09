"""Device -> host copies of the dump, on the forward thread: into a staging-ring region (else buffers the writer
provides), on a side stream when asked (SGLANG_EAGLE3_EXT_DUMP_COPY_STREAM), with one CUDA event the writer
waits on before reading the host copies. Used by the prefill capture (capture.py) and the verify capture
(verify_capture.py)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from .assemble import ChunkBatch


@dataclass
class CopyRequest:
    """One pure-EXTEND batch's states, checked by DumpTarget.on_logits (device tensors, CPU lists)."""

    rids: list
    pfx: list  # extend_prefix_lens_cpu
    ext: list  # extend_seq_lens_cpu
    orig: Any  # orig_seq_lens: device tensor (read on the writer thread after the event) or list
    ids: Any  # [>=T] token ids
    aux: Any  # packed [>=T, K*H] tensor, or a list of K [>=T, H]
    layout: str  # "packed" | "list"
    pre: Any  # [>=T, H] pre-norm final state, or None
    hidden: Any  # [>=T, H] post-norm final state (LogitsProcessor's hidden_states)
    T: int  # extend tokens of the batch
    K: int  # aux layers
    H: int  # hidden size
    multimodal: list | None = None  # per request: carries multimodal inputs (not dumped); None: none does


class _Copies:
    """copy(host, device) on the side stream; after the `with`, `event` is the CUDA event (None on CPU)."""

    def __init__(self, side, cuda: bool):
        self.side, self.cuda, self.event = side, cuda, None

    def __call__(self, h, t):
        if self.side is not None and t.is_cuda:  # the caching allocator must not give t's memory
            t.record_stream(self.side)  # to the next forward before this copy read it
        h.copy_(t, non_blocking=self.cuda)
        return h


class HostCopier:
    """The side stream and the staging ring (the writer's) of one dump target."""

    def __init__(self, cfg, writer):
        self.cfg, self.writer = cfg, writer
        self.ring = writer.staging if writer is not None else None
        self._stream = None

    def uses_side_stream(self, cuda: bool) -> bool:
        return cuda and bool(self.cfg.copy_stream)

    def _side_stream(self, device):
        if self._stream is None:
            import torch

            self._stream = torch.cuda.Stream(device=device)
        return self._stream

    @contextlib.contextmanager
    def copies(self, device, cuda: bool):
        """Copies issued inside start once the compute stream has produced the states."""
        import torch

        side = self._side_stream(device) if self.uses_side_stream(cuda) else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream())
        c = _Copies(side, cuda)
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            yield c
            if cuda:  # the writer waits on this before reading the host copies
                c.event = torch.cuda.Event()
                c.event.record()

    def host_buffers(self, specs: dict, cuda: bool):
        """({name: empty host tensor} for each (shape, dtype), the ring region they live in or None).
        Without ring room, the writer provides (and says so once)."""
        if self.ring is not None:
            from .staging import region_size

            region = self.ring.alloc(region_size(specs.values()))
            if region is not None:
                return dict(zip(specs, self.ring.tensors(region, specs.values()))), region
        return self.writer.host_buffers(specs, cuda), None

    @contextlib.contextmanager
    def staged(self, w, nbytes: int):
        """Between w.reserve(nbytes) and w.submit(batch): yields a holder whose `region` the caller sets from
        host_buffers(); on an error the budget and the region go back, else the writer frees the region once
        nothing holds `holder.batch`'s host copies."""
        st = _Staged()
        try:
            yield st
        except BaseException:
            w.unreserve(nbytes)
            if st.region is not None:
                self.ring.free(st.region)
            raise
        if st.region is not None:
            st.batch.free_host = lambda r=st.region, ring=self.ring: ring.free(r)


class _Staged:
    region = None
    batch = None


def copy_prefill(copier: HostCopier, w, r: CopyRequest, norm=None) -> bool:
    """Reserve, copy and submit one EXTEND batch (a ChunkBatch); `norm`: the final norm module whose weight is
    sent once with the first batch (pre-norm dumps), else None. False: the writer stalled, nothing sent."""
    import torch

    cfg, T, K, H = copier.cfg, r.T, r.K, r.H
    bs = len(r.rids)
    item = r.hidden.element_size()
    nbytes = T * r.ids.element_size() + T * K * H * item + bs * 8
    nbytes += T * H * item * (int(cfg.want_prenorm) + int(cfg.want_postnorm))
    if not w.reserve(nbytes):  # backpressure: may block this (forward) thread, never drops; False: stalled
        return False
    cuda = r.hidden.is_cuda
    with copier.staged(w, nbytes) as st:
        # host destinations: views of one ring region when it has room, else pinned allocations
        ids = r.ids[:T]
        if copier.uses_side_stream(cuda):
            # SGLang's spec-v1 draft extend (0.5.10 prepare_for_extend) rewrites the batch's input_ids in place on
            # the compute stream right after this forward: the side stream reads a copy taken here, in order
            ids = ids.clone()
        srcs = {
            "ids": ids,
            "aux": r.aux[:T] if r.layout == "packed" else None,
            "pre": r.pre[:T] if cfg.want_prenorm else None,
            "post": r.hidden[:T] if cfg.want_postnorm else None,
            "orig": r.orig[:bs] if hasattr(r.orig, "shape") else None,
        }
        # NaN/Inf flags per row, on the GPU: the io threads then need no pass over the bytes (each torch
        # call of theirs is a GIL hand-off with this thread). Not on a CPU model (a full pass on this
        # thread), nor for the writer process, whose checks share no GIL with us.
        if cuda and not w.checks_finite_off_gil:
            states = [a[:T] for a in r.aux] if r.layout == "list" else [srcs["aux"]]
            srcs["ok"] = rows_finite(states + [srcs[k] for k in ("pre", "post") if srcs[k] is not None])
        specs = {k: (tuple(t.shape), t.dtype) for k, t in srcs.items() if t is not None}
        if r.layout == "list":
            specs["aux"] = ((K, T, H), r.aux[0].dtype)
        dst, st.region = copier.host_buffers(specs, cuda)
        norm_h = None
        with copier.copies(r.hidden.device, cuda) as copy:
            for k, t in srcs.items():
                if t is not None:
                    copy(dst[k], t)
            if r.layout == "list":
                for k, a in enumerate(r.aux):
                    copy(dst["aux"][k], a[:T])
            if norm is not None:
                wt = norm.weight.data
                norm_h = (
                    copy(torch.empty(wt.shape, dtype=wt.dtype, device="cpu", pin_memory=cuda), wt),
                    float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))),
                )
        orig_h = dst["orig"] if "orig" in dst else list(r.orig)[:bs]
        st.batch = ChunkBatch(
            r.rids,
            r.pfx,
            r.ext,
            orig_h,
            dst["ids"],
            dst["aux"],
            r.layout,
            dst.get("pre"),
            dst.get("post"),
            copy.event,
            nbytes,
            norm_h,
            row_ok=dst.get("ok"),
            multimodal=r.multimodal,
        )
    w.submit(st.batch)
    return True


def rows_finite(states):
    """[T] bool: row t of every state is free of NaN/Inf. On CUDA only: a few small reductions on the GPU,
    copied with the states, so the writer's io threads need no full pass over the bytes per sample (each
    such call also waits for the GIL held by the busy scheduler thread). On a CPU model this would be a
    full pass on the forward thread, so there the io threads check instead."""
    import torch

    peaks = [torch.linalg.vector_norm(x, float("inf"), dim=-1) for x in states]  # max |x| per row: NaN/Inf stay
    return torch.stack(peaks).isfinite().all(0)
