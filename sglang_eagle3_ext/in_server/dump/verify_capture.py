"""Forward-thread side of dump-while-serving: the target's states of the tokens that end up in the output,
taken from its TARGET_VERIFY batches (SGLang 0.5.14+, EAGLEWorkerV2, chain drafts: topk 1).

A verify batch holds `ndt` rows per request: row j is the input token at position seq_len + j (row 0 the
previous bonus token, then the draft tokens). After sampling, `accept_lens[i]` (accepted drafts + the bonus)
says how many of them are now part of the sequence: rows i*ndt + [0, accept_len). Their states are:
- aux (K x H): `logits_output.hidden_states` of the verify result, the very tensor the draft-extend is fed;
- final (pre/post norm): seen by the LogitsProcessor hook (capture.DumpTarget.on_logits -> on_logits here).
  Under a CUDA graph that hook runs only while the graph is captured: it then records a copy into a static
  buffer (allocated by the eager warm-up that precedes every capture, largest batch first), which each
  replay refreshes; an eager verify hands over its tensors directly.
After the verify, the rows of the dumped requests, their token ids, positions and accept lengths are copied
to host memory asynchronously and handed to the writer (serving_assembler.py stitches them per request).
The end of a request (finished / aborted) comes from SchedulerOutputStreamer.stream_output (on_streamed).
"""

from __future__ import annotations

import logging

from ..._log import log_once, logger
from ...dump.config import NODUMP_RID_PREFIX
from ...dump.manifest import sanitize_id
from .assemble import ChunkBatch
from .capture import carries_multimodal

_active = None  # the VerifyCapture of this process's writer rank


def set_active(vc) -> None:
    global _active
    _active = vc


def get_active():
    return _active


class VerifyBatch(ChunkBatch):
    """Host copies of one verify batch's rows for the dumped requests: ids/pos [n, ndt], acc [n],
    aux [n*ndt, K*H], finals [F, n*ndt, H] (F = 1 or 2: pre and/or post norm, in that order)."""

    def __init__(self, rids, ndt: int, ids, pos, acc, aux, finals, event, nbytes: int):
        super().__init__(rids, [], [], [], ids, aux, "packed", event=event, nbytes=nbytes)
        self.ndt, self.pos, self.acc, self.finals = ndt, pos, acc, finals


class RequestEnd(ChunkBatch):
    """Requests that ended: [(rid, sample_id, kind, prompt_ids, output_ids)], kind finished | aborted."""

    def __init__(self, ended: list):
        super().__init__([e[0] for e in ended], [], [], [], None, None, "packed")
        self.ended = ended


def _finished_kind(req) -> str | None:
    reason = getattr(req, "finished_reason", None)
    if reason is None:
        return None
    return "aborted" if type(reason).__name__ == "FINISH_ABORT" else "finished"


class VerifyCapture:
    def __init__(self, target, scfg):
        self.target, self.scfg = target, scfg
        self.writer = target.writer
        self.K, self.H = len(target.layers), target.hidden
        self.n_finals = int(target.cfg.want_prenorm) + int(target.cfg.want_postnorm)
        self.static = None  # [F, rows, H] written by the captured graphs
        self.graph_rows = 0  # rows the captured graphs write (0: no graph recorded a copy)
        self.eager = None  # finals of the last eager TARGET_VERIFY forward
        self.disabled: str | None = None
        self.refused: set[str] = set()  # rids the assembler will not write (it says so)
        self._sids: dict[str, str] = {}  # rid -> sanitised id, while the request runs

    def fail(self, msg: str, *a) -> None:
        """Response capture stops (serving and prompt dumps go on); said once, loudly."""
        if self.disabled is None:
            self.disabled = msg % a if a else msg
            logger.error("dump while serving: response capture OFF: %s", self.disabled)

    # ---- LogitsProcessor hook: final states of TARGET_VERIFY (eager, or recorded into a CUDA graph) ----
    def on_logits(self, fb, pre, post) -> bool:
        """True when `fb` is a TARGET_VERIFY batch (handled here, nothing else to do for it)."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        if getattr(fb, "forward_mode", None) != ForwardMode.TARGET_VERIFY:
            return False
        cfg = self.target.cfg
        srcs = [t for t, want in ((pre, cfg.want_prenorm), (post, cfg.want_postnorm)) if want]
        if any(t is None for t in srcs):
            self.fail(
                "the final norm's hook did not see the verify forward (torch.compile?): set "
                "SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm"
            )
            return True
        import torch

        T = srcs[0].shape[0]
        if _capturing(srcs[0]):
            if self.static is None or self.static.shape[1] < T:
                self.fail(
                    "a TARGET_VERIFY CUDA graph of %d rows was captured without an eager warm-up of at least "
                    "that size first (static buffer %s); launch with --disable-cuda-graph to dump responses",
                    T,
                    None if self.static is None else tuple(self.static.shape),
                )
                return True
            for i, t in enumerate(srcs):  # recorded into the graph: every replay refreshes the buffer
                self.static[i, :T].copy_(t[:T])
            self.graph_rows = max(self.graph_rows, T)
            return True
        # sized by the eager warm-ups: the largest graph's comes first, and grows it while no graph recorded a copy
        if _graphs_possible(srcs[0]) and (self.static is None or (not self.graph_rows and self.static.shape[1] < T)):
            self.static = torch.empty((len(srcs), T, self.H), dtype=srcs[0].dtype, device=srcs[0].device)
        self.eager = srcs
        return True

    # ---- EAGLEWorkerV2.verify wrapper ----------------------------------------------------------------
    def rows_to_dump(self, batch) -> list[int]:
        """Indices into batch.reqs of the requests whose verify rows are copied."""
        w = self.writer
        if self.disabled or w is None or not w.accepting:
            return []
        mode = getattr(batch, "forward_mode", None)
        if mode is not None and mode.is_idle():
            return []
        min_tokens = self.target.cfg.min_tokens
        out = []
        for i, req in enumerate(batch.reqs):
            rid = req.rid
            if (
                rid.startswith(NODUMP_RID_PREFIX)
                or rid in self.refused
                or len(req.origin_input_ids) < min_tokens
                or carries_multimodal(getattr(req, "multimodal_inputs", None))
            ):  # refused at its prefill
                continue
            sid = self._sids.get(rid)
            if sid is None:
                sid = self._sids[rid] = sanitize_id(rid)
            if not w.is_done(sid):
                out.append(i)
        return out

    def before_verify(self, batch) -> tuple | None:
        idx = self.rows_to_dump(batch)
        if not idx:
            return None
        vi = batch.spec_info
        if int(getattr(vi, "topk", 1) or 1) > 1:
            self.fail(
                "tree drafts (topk %s) are compacted after the verify: only chain drafts (topk 1) are captured", vi.topk
            )
            return None
        self.eager = None
        return vi, idx

    def after_verify(self, batch, vi, result, idx: list[int]) -> None:
        import torch

        ndt, bs = int(vi.draft_token_num), len(batch.reqs)
        N = bs * ndt
        lo = getattr(result, "logits_output", None)
        hs = getattr(lo, "hidden_states", None)
        acc = getattr(result, "accept_lens", None)
        if hs is None or acc is None or hs.dim() != 2 or hs.shape[0] < N or hs.shape[1] != self.K * self.H:
            return self.fail(
                "the verify result carries hidden states %s / accept_lens %s; expected [>=%d, %d] "
                "(K=%d aux layers of width %d)",
                None if hs is None else tuple(hs.shape),
                None if acc is None else tuple(acc.shape),
                N,
                self.K * self.H,
                self.K,
                self.H,
            )
        if self.eager is not None:
            finals = self.eager
        elif getattr(result, "can_run_cuda_graph", True) and self.static is not None and self.graph_rows >= N:
            finals = list(self.static)
        else:
            return self.fail("no final state for a verify of %d rows (graph buffer %d rows)", N, self.graph_rows)
        if any(f.shape[0] < N for f in finals):
            return self.fail("final states of %d rows for a verify of %d rows", finals[0].shape[0], N)
        self.eager = None
        cuda = hs.is_cuda
        if len(idx) == bs:
            take = lambda t, per_req=True: t[:N] if per_req else t[:bs]  # noqa: E731
        else:
            rows = torch.tensor([b * ndt + j for b in idx for j in range(ndt)], dtype=torch.int64)
            reqs = torch.tensor(idx, dtype=torch.int64)
            if cuda:
                rows = rows.pin_memory().to(hs.device, non_blocking=True)
                reqs = reqs.pin_memory().to(hs.device, non_blocking=True)
            take = lambda t, per_req=True: t.index_select(0, rows if per_req else reqs)  # noqa: E731
        n = len(idx)
        srcs = {
            "ids": take(vi.draft_token).view(n, ndt),
            "pos": take(vi.positions).view(n, ndt),
            "acc": take(acc, False),
            "aux": take(hs),
        }
        if len(finals) == 1:
            srcs["finals"] = take(finals[0]).unsqueeze(0)
        else:
            srcs["finals"] = torch.stack([take(f) for f in finals])
        self._copy_and_submit(batch, idx, ndt, srcs, cuda)

    def _copy_and_submit(self, batch, idx, ndt, srcs: dict, cuda: bool) -> None:
        w, copier = self.writer, self.target.copier
        nbytes = sum(t.numel() * t.element_size() for t in srcs.values())
        if w.reserve(nbytes) is False:  # the writer stalled and stopped
            return
        with copier.staged(w, nbytes) as st:
            if copier.uses_side_stream(cuda):
                # the rows leave graph-owned buffers (the next replay rewrites them): a device copy first, on the
                # compute stream (microseconds), then the device->host copies overlap the next forward
                srcs = {k: t.clone() for k, t in srcs.items()}
            dst, st.region = copier.host_buffers({k: (tuple(t.shape), t.dtype) for k, t in srcs.items()}, cuda)
            with copier.copies(srcs["aux"].device, cuda) as copy:
                for k, t in srcs.items():
                    copy(dst[k], t)
            st.batch = VerifyBatch(
                [batch.reqs[i].rid for i in idx],
                ndt,
                dst["ids"],
                dst["pos"],
                dst["acc"],
                dst["aux"],
                dst["finals"],
                copy.event,
                nbytes,
            )
        w.submit(st.batch)

    # ---- SchedulerOutputStreamer.stream_output wrapper: requests that ended ----------------------------
    def on_streamed(self, reqs) -> None:
        w = self.writer
        if w is None:
            return
        ended = []
        for req in reqs:
            kind = _finished_kind(req)
            if kind is None:
                continue
            rid = req.rid
            # a finished request can be streamed twice (overlap): mark the request object itself (an id() of a
            # freed Req is reused by a later one, which must not be taken for seen)
            if getattr(req, "_sge3_ended", False) or rid.startswith(NODUMP_RID_PREFIX):
                continue
            req._sge3_ended = True
            ended.append(
                (
                    rid,
                    self._sids.pop(rid, None) or sanitize_id(rid),
                    kind,
                    req.origin_input_ids,
                    # what the client gets: spec verify steps can overshoot finished_len
                    list(getattr(req, "output_ids_through_stop", req.output_ids)),
                )
            )
        if ended and w.accepting:
            w.submit(RequestEnd(ended))


def _capturing(t) -> bool:
    """This forward is being recorded into a CUDA graph."""
    import torch

    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _graphs_possible(t) -> bool:
    return t.is_cuda


def verify_hook(wrapped, args, kwargs):
    """Body of in_server/hooks/eagle_worker_v2.dump_verify; never raises for the dump's sake."""
    vc = _active
    plan = None
    if vc is not None and not vc.disabled:
        from ...patching import arg

        batch = arg(wrapped, args, kwargs, "batch")
        try:
            plan = vc.before_verify(batch)
        except Exception as e:  # noqa: BLE001 - serving must go on
            vc.fail("%s: %s", type(e).__name__, e)
    result = wrapped(*args, **kwargs)
    if plan is not None:
        try:
            vc.after_verify(batch, plan[0], result, plan[1])
        except Exception as e:  # noqa: BLE001
            logger.exception("dump while serving: verify capture failed")
            vc.fail("%s: %s", type(e).__name__, e)
    return result


def streamed_hook(reqs) -> None:
    vc = _active
    if vc is None:
        return
    try:
        vc.on_streamed(reqs)
    except Exception as e:  # noqa: BLE001
        log_once(
            "dump.streamed",
            "dump while serving: request-end hook failed: %s: %s",
            type(e).__name__,
            e,
            level=logging.ERROR,
        )
