"""Writer-thread side of dump-while-serving: hold each request's prompt (from the prefill batches), append
the rows of its verify batches that ended up in the output, and when the request ends write prompt+response
as one sample (finished) or forget it (aborted: nothing written, no memory kept).

The sample's tokens are the request's own: prompt + output ids, up to the last token whose state was
computed (the final bonus token of a request has none: no verify ran after it). Every stitched token id is
checked against the request's ids, every verify chunk must start where the stitched part ends. Its record
(file metadata and manifest line) says which tokens came from where:
  prompt_len      tokens of the request's prompt (the loss mask of an export starts after them)
  prefill_tokens  tokens [0, prefill_tokens) whose states come from EXTEND batches (after a retraction this
                  includes the output re-prefilled with the prompt)
  verify_tokens   tokens [prefill_tokens, num_tokens) whose states come from TARGET_VERIFY batches
  accept_len      the request's own accept length (accepted drafts + bonus per verify)
The prompt's states are copied out of the staging memory once the prompt is complete, and each verify
batch is released right after its rows are copied: nothing of the staging ring waits for a request to end.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from ..._log import log_once
from ...dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE
from .assemble import Assembler, Sample
from .verify_capture import RequestEnd, VerifyBatch

HELD_IDLE_S = 900.0  # a held request that saw no verify and no end for this long is dropped (lost hook)
COUNTERS = (
    "verify_batches",
    "response_samples",
    "response_tokens",
    "skipped_not_sampled",
    "skipped_accept_len",
    "dropped_aborted",
    "dropped_idle",
    "refused_verify_gap",
    "refused_token_mismatch",
    "dropped_memory",
    "held_requests",
    "held_mb",
)


@dataclasses.dataclass
class StitchedSample(Sample):
    """A finished request's prompt+response, ready for the writer's io thread."""

    tensors: dict = dataclasses.field(default_factory=dict)
    record_extra: dict = dataclasses.field(default_factory=dict)

    def materialize(self, num_aux: int) -> dict:
        return self.tensors

    def finite(self):
        return None  # the io thread checks the tensors


class Held:
    """One request: its prompt tensors and the response rows appended so far (growable buffers)."""

    def __init__(self, rid: str, sid: str, prompt: dict):
        self.rid, self.sid, self.prompt = rid, sid, prompt
        self.prefill = int(prompt[T_IDS].shape[0])
        self.length = self.prefill
        self.resp: dict = {}  # name -> [cap, ...] buffer; rows [0, length - prefill) used
        self.steps: list = []  # (start position, accept length) per verify
        self.touched = time.monotonic()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for d in (self.prompt, self.resp) for t in d.values())

    def append(self, rows: dict) -> None:
        import torch

        used = self.length - self.prefill
        n = next(iter(rows.values())).shape[0]
        for k, t in rows.items():
            buf = self.resp.get(k)
            if buf is None or buf.shape[0] < used + n:
                new = torch.empty((max(64, 2 * (used + n)), *t.shape[1:]), dtype=t.dtype)
                if buf is not None:
                    new[:used] = buf[:used]
                self.resp[k] = buf = new
            buf[used : used + n] = t
        self.steps.append((self.length, n))
        self.length += n
        self.touched = time.monotonic()

    def accept_len(self, upto: int) -> float | None:
        steps = [a for start, a in self.steps if start < upto]
        return sum(steps) / len(steps) if steps else None


class ServingAssembler(Assembler):
    def __init__(self, writer, scfg, vc):
        super().__init__(writer.is_done, writer.release_host, writer.cfg.min_tokens)
        self.w, self.scfg, self.vc = writer, scfg, vc
        self.num_aux = writer.num_aux
        self.final_keys = [
            k for k, want in ((T_PRE, writer.cfg.want_prenorm), (T_POST, writer.cfg.want_postnorm)) if want
        ]
        self.held: dict[str, Held] = {}
        self.max_held_bytes = writer.cfg.max_pending_bytes
        self.held_bytes = 0
        writer.add_counters(COUNTERS)

    # ---- counters ----------------------------------------------------------------------------------
    def _inc(self, key: str, n: int = 1) -> None:
        self.w.count(key, n)

    def _gauges(self) -> None:
        self.w.set_gauges(held_requests=len(self.held), held_mb=round(self.held_bytes / 2**20, 1))

    def _refuse(self, rid: str, key: str, msg: str, *a) -> None:
        self._forget(rid)
        self.vc.refused.add(rid)
        self._inc(key)
        log_once(
            f"dump.serving.{key}",
            "dump while serving: not writing request %s: " + msg + " (said once; counted as %s)",
            rid,
            *a,
            key,
            level=logging.WARNING,
        )

    # ---- feeding -----------------------------------------------------------------------------------
    def feed(self, batch):
        if isinstance(batch, VerifyBatch):
            self._feed_verify(batch)
            out = [], []
        elif isinstance(batch, RequestEnd):
            out = self._feed_end(batch), []
        else:
            for rid, p in zip(batch.rids, batch.prefix_lens):
                if p == 0 and rid in self.held:  # re-prefilled after a retraction: the new prefill replaces it
                    self._forget(rid)
            done, refused = super().feed(batch)
            for s in done:
                self._hold(s)
            for r in refused:
                self.vc.refused.add(r.rid)
            out = [], refused
        self._expire()
        self._gauges()
        return out

    def _hold(self, s: Sample) -> None:
        """A complete prompt: copy it out of the staging memory, let go of its batches, keep it."""
        tensors = {k: t.clone() for k, t in s.materialize(self.num_aux).items()}
        for pc in s.pieces:  # not finish(): the sample id stays taken until the request ends
            self._unref(pc.batch)
        s.pieces = []
        h = self.held[s.rid] = Held(s.rid, s.sample_id, tensors)
        self.held_bytes += h.nbytes
        if self.held_bytes > self.max_held_bytes:
            self._refuse(
                s.rid,
                "dropped_memory",
                "held requests exceed %d MB (SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB)",
                self.max_held_bytes >> 20,
            )

    def _feed_verify(self, vb: VerifyBatch) -> None:
        try:
            self._inc("verify_batches")
            acc, pos = vb.acc.tolist(), vb.pos
            F = vb.finals.shape[0]
            for i, rid in enumerate(vb.rids):
                h = self.held.get(rid)
                a = int(acc[i])
                if h is None or a <= 0:
                    continue
                p = pos[i, :a].tolist()
                if p[0] != h.length or p != list(range(p[0], p[0] + a)):
                    self._refuse(
                        rid,
                        "refused_verify_gap",
                        "a verify chunk at positions %s after %d stitched tokens",
                        p[:4],
                        h.length,
                    )
                    continue
                r0 = i * vb.ndt
                rows = {T_IDS: vb.ids[i, :a].to(dtype=h.prompt[T_IDS].dtype), T_AUX: vb.aux[r0 : r0 + a]}
                for f, key in zip(range(F), self.final_keys):
                    rows[key] = vb.finals[f, r0 : r0 + a]
                before = h.nbytes
                h.append(rows)
                self.held_bytes += h.nbytes - before
                if self.held_bytes > self.max_held_bytes:
                    self._refuse(
                        rid,
                        "dropped_memory",
                        "held requests exceed %d MB (SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB)",
                        self.max_held_bytes >> 20,
                    )
        finally:
            self.release_unused(vb)  # its host copies are no longer needed: release now

    def _feed_end(self, ev: RequestEnd) -> list:
        done = []
        try:
            for rid, sid, kind, prompt_ids, output_ids in ev.ended:
                if rid in self.partials:  # ended mid-prefill: its chunks go now
                    self._drop(rid)
                h = self.held.get(rid)
                if h is None:
                    if kind == "finished" and not self.w.cfg.wanted(sid):
                        self._inc("skipped_not_sampled")
                    continue
                if kind != "finished":
                    self._forget(rid)
                    self._inc("dropped_aborted")
                    continue
                s = self._stitch(h, prompt_ids, output_ids)
                if s is not None:
                    self.held.pop(rid)
                    self.held_bytes -= h.nbytes
                    done.append(s)
        finally:
            self.release_unused(ev)
            # here, on the writer thread after every batch of these requests (refusals of _stitch and of queued
            # verify batches come after the end): a later request with the same rid starts unrefused
            for rid, *_ in ev.ended:
                self.vc.refused.discard(rid)
        return done

    def _stitch(self, h: Held, prompt_ids, output_ids):
        import torch

        tokens = list(prompt_ids) + list(output_ids)
        L = min(h.length, len(tokens))
        if L < h.prefill:
            return self._refuse(
                h.rid, "refused_token_mismatch", "%d prefill tokens but the request has %d", h.prefill, len(tokens)
            )
        acc = h.accept_len(L)
        if self.scfg.max_accept_len is not None and (acc is None or acc >= self.scfg.max_accept_len):
            self._forget(h.rid)
            self._inc("skipped_accept_len")
            return None
        nv = L - h.prefill
        out = {}
        for k, t in h.prompt.items():
            out[k] = torch.cat([t, h.resp[k][:nv]]) if nv else t
        want = torch.tensor(tokens[:L], dtype=out[T_IDS].dtype)
        if not torch.equal(out[T_IDS], want):
            bad = int((out[T_IDS] != want).nonzero()[0, 0])
            return self._refuse(
                h.rid,
                "refused_token_mismatch",
                "stitched token %d is %d, the request's is %d",
                bad,
                int(out[T_IDS][bad]),
                int(want[bad]),
            )
        if nv:
            self._inc("response_samples")
            self._inc("response_tokens", nv)
        extra = {
            "prompt_len": min(len(prompt_ids), L),
            "prefill_tokens": h.prefill,
            "verify_tokens": nv,
            "source": "serving",
        }
        if acc is not None:
            extra["accept_len"] = round(acc, 4)
        return StitchedSample(h.rid, h.sid, [], L, tensors=out, record_extra=extra)

    # ---- letting go ----------------------------------------------------------------------------------
    def _forget(self, rid: str) -> None:
        """Drop a held request and free its sample id (nothing written)."""
        h = self.held.pop(rid, None)
        if h is not None:
            self.held_bytes -= h.nbytes
            super().finish(Sample(h.rid, h.sid, []))

    def _expire(self) -> None:
        now = time.monotonic()
        for rid in [r for r, h in self.held.items() if now - h.touched > HELD_IDLE_S]:
            self._forget(rid)
            self._inc("dropped_idle")

    def finish(self, sample) -> None:
        if isinstance(sample, StitchedSample):
            sample.tensors = {}
        super().finish(sample)

    def drop_all(self) -> None:
        super().drop_all()
        for rid in list(self.held):
            self._forget(rid)
        self._gauges()
