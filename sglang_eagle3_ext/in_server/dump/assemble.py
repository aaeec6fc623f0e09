"""Host-side stitching of prefill chunks into complete samples (pure logic, no threads, no CUDA).

Each EXTEND batch covers, per request, the token range [prefix, prefix + extend) of its prompt.
A request is complete when its stitched length reaches the full prompt length SGLang records
(`ForwardBatch.orig_seq_lens` = max(extend end, len(origin_input_ids))). A first chunk that starts
at prefix > 0 means the radix cache served the head of the prompt: those states were never
computed here, so the request is refused (never written as if complete).

A request can also end before it is complete (client disconnect, /abort_request, a retraction that never
re-prefills). SGLang runs at most one chunked request at a time and puts its next chunk into the very
next prefill batch, so a partial that misses STALE_BATCHES consecutive batches has ended: its host memory
is released then (else the staging ring's tail and the budget would stay pinned by a dead request).
Sample ids are unique among the samples in flight: a second request with the same (sanitised) id is
refused while the first is being stitched or written (two writers of one file would collide).
"""

from __future__ import annotations

import collections
import dataclasses
import threading

from ..._log import log_once
from ...dump.config import NODUMP_RID_PREFIX
from ...dump.manifest import sanitize_id
from ...dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE

# A partial absent from this many consecutive batches has ended. SGLang's chunked request is in the very next
# prefill batch; one batch of margin costs nothing (the memory of one dead request, one batch longer).
STALE_BATCHES = 2
RECENT_REFUSED = 1024  # rids released as ended or refused as duplicates: what to do with a later chunk of one


class ChunkBatch:
    """Host copies of one EXTEND batch (rows [0, T) of every tensor), plus the event that says the
    asynchronous device->host copies have landed."""

    def __init__(
        self,
        rids,
        prefix_lens,
        extend_lens,
        orig_lens,
        ids,
        aux,
        aux_layout: str,
        pre=None,
        post=None,
        event=None,
        nbytes: int = 0,
        norm=None,
        row_ok=None,
        multimodal=None,
    ):
        self.rids = list(rids)
        self.prefix_lens = [int(x) for x in prefix_lens]
        self.extend_lens = [int(x) for x in extend_lens]
        self.orig_lens = orig_lens  # host tensor or list, read only after wait()
        self.ids, self.aux, self.aux_layout = ids, aux, aux_layout  # layout: "list" [K,T,H] | "packed" [T,K*H]
        self.pre, self.post = pre, post
        self.event = event
        self.nbytes = nbytes
        self.norm = norm  # (weight [H] host, eps) once per process, else None
        self.free_host = None  # returns the staging-ring region the host copies live in
        self.row_ok = row_ok  # [T] bool, row free of NaN/Inf (None: the writer checks itself)
        self.multimodal = multimodal  # per request: it carries images/audio/video (None: no request does)
        self.refs = 0
        self.released = False
        self._lock = threading.Lock()

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    def aux_rows(self, a: int, b: int):
        """[b-a, K, H] view of the aux states of rows [a, b)."""
        if self.aux_layout == "list":
            return self.aux[:, a:b].transpose(0, 1)
        k_h = self.aux.shape[1]
        return self.aux[a:b].view(b - a, -1, k_h)  # caller reshapes with K

    def add_ref(self) -> None:
        with self._lock:
            self.refs += 1

    def drop_ref(self) -> bool:
        """True when the last holder let go (the caller releases `nbytes`)."""
        with self._lock:
            self.refs -= 1
            if self.refs <= 0 and not self.released:
                self.released = True
                return True
            return False


@dataclasses.dataclass
class Piece:
    batch: ChunkBatch
    start: int
    end: int


@dataclasses.dataclass
class Sample:
    rid: str
    sample_id: str
    pieces: list
    length: int = 0
    seen: int = 0  # Assembler.fed when its last chunk came

    def finite(self) -> bool | None:
        """From the capture's per-row flags; None when some batch came without them."""
        if any(p.batch.row_ok is None for p in self.pieces):
            return None
        return all(p.batch.row_ok.numpy()[p.start : p.end].all() for p in self.pieces)  # numpy: no GIL handoff

    def materialize(self, num_aux: int) -> dict:
        """Contiguous tensors of the whole prompt: {input_ids, aux_hidden_states [L, K*H], finals}."""
        import torch

        def cat(xs):
            return xs[0] if len(xs) == 1 else torch.cat(xs, 0)

        out = {T_IDS: cat([p.batch.ids[p.start : p.end] for p in self.pieces]).to(torch.int64)}
        auxs = []
        for p in self.pieces:
            rows = p.batch.aux_rows(p.start, p.end)
            auxs.append(rows.reshape(p.end - p.start, -1))
        out[T_AUX] = cat(auxs).contiguous()
        if out[T_AUX].shape[1] % num_aux:
            raise ValueError(f"aux width {out[T_AUX].shape[1]} is not a multiple of {num_aux} layers")
        first = self.pieces[0].batch
        if first.pre is not None:
            out[T_PRE] = cat([p.batch.pre[p.start : p.end] for p in self.pieces]).contiguous()
        if first.post is not None:
            out[T_POST] = cat([p.batch.post[p.start : p.end] for p in self.pieces]).contiguous()
        return out


@dataclasses.dataclass
class Refusal:
    rid: str
    reason: str
    kind: str  # "prefix_cache" | "gap" | "overrun" | "duplicate_id" | "ended" | "multimodal"


class Assembler:
    """Feeds batches in forward order; returns (complete samples, refusals). Holds partial samples."""

    def __init__(self, is_done, release, min_tokens: int = 1):
        self.is_done = is_done  # callable(sample_id) -> bool
        self.release = release  # callable(ChunkBatch): its host memory is no longer held
        self.min_tokens = min_tokens  # shorter prompts (SGLang's warm-up) are not dumped
        self.partials: dict[str, Sample] = {}
        self.fed = 0  # batches fed so far
        self.ended = 0  # partials released because their request ended unfinished
        self._recent: collections.OrderedDict = collections.OrderedDict()  # rid -> why it is not stitched
        self._active: dict[str, str] = {}  # sample id -> rid, from the first chunk until finish()
        self._active_lock = threading.Lock()  # finish() runs on the io threads

    def feed(self, batch: ChunkBatch) -> tuple[list[Sample], list[Refusal]]:
        done, refused = [], []
        self.fed += 1
        orig = batch.orig_lens.tolist() if hasattr(batch.orig_lens, "tolist") else list(batch.orig_lens)
        row = 0
        for i, rid in enumerate(batch.rids):
            p, n = batch.prefix_lens[i], batch.extend_lens[i]
            a, b = row, row + n
            row = b
            sid = self._admit(batch, i, rid, orig[i], refused)
            if sid is None:
                continue
            part = self._partial_for(rid, sid, p, refused)
            if part is None:
                continue
            batch.add_ref()
            part.pieces.append(Piece(batch, a, b))
            part.length += n
            part.seen = self.fed
            total = int(orig[i])
            if part.length == total:
                done.append(self.partials.pop(rid))
            elif part.length > total:
                self._drop(rid)
                refused.append(Refusal(rid, f"stitched {part.length} tokens > prompt length {total}", "overrun"))
        if batch.refs == 0:  # nothing of this batch is kept
            self.release_unused(batch)
        self.release_ended(STALE_BATCHES)
        return done, refused

    def _admit(self, batch: ChunkBatch, i: int, rid: str, orig_len, refused: list) -> str | None:
        """The sample id of request `i` of `batch` when it is to be dumped at all, else None."""
        if rid.startswith(NODUMP_RID_PREFIX):
            return None
        if orig_len < self.min_tokens:
            log_once(
                "dump.short",
                "dump: not dumping prompts shorter than %d tokens (e.g. SGLang's warm-up "
                "request; set SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS to change)",
                self.min_tokens,
            )
            return None
        sid = sanitize_id(rid)
        if self.is_done(sid):
            self._drop(rid)
            return None
        if batch.multimodal is not None and batch.multimodal[i]:
            self._skip_multimodal(rid, refused)
            return None
        return sid

    def _partial_for(self, rid: str, sid: str, p: int, refused: list) -> Sample | None:
        """The partial sample a chunk starting at token `p` extends (a new one at token 0); None when the chunk
        is not to be stitched (refusals appended to `refused`)."""
        part = self.partials.get(rid)
        if p == 0:
            if part is not None:  # re-prefilled from scratch (retraction): start over
                self._drop(rid)
            with self._active_lock:
                other = self._active.get(sid)
                if other is None:
                    self._active[sid] = rid
            if other == rid:  # re-prefilled (retraction) while its sample is in flight
                if not self.restitch(rid):
                    return None
            elif other is not None:
                refused.append(
                    Refusal(
                        rid,
                        f"sample id {sid!r} is already being dumped for request {other!r} "
                        f"(request ids must stay distinct after sanitising)",
                        "duplicate_id",
                    )
                )
                self._remember(rid, "duplicate_id")
                return None
            part = self.partials[rid] = Sample(rid, sid, [])
            return part
        if part is None:
            if self._recent.get(rid) == "duplicate_id":  # its later chunks: refused once, above
                return None
            if self._recent.get(rid) == "ended":
                refused.append(
                    Refusal(
                        rid,
                        f"a chunk at token {p} came after the request was absent from "
                        f"{STALE_BATCHES} batches and released as ended",
                        "ended",
                    )
                )
                return None
            refused.append(
                Refusal(
                    rid,
                    f"first prefill chunk starts at token {p}: the prefix cache served "
                    f"{p} tokens whose states were not computed; launch with "
                    f"--disable-radix-cache",
                    "prefix_cache",
                )
            )
            return None
        if part.length != p:
            self._drop(rid)
            refused.append(Refusal(rid, f"chunk starts at {p} but {part.length} tokens were stitched", "gap"))
            return None
        return part

    def _skip_multimodal(self, rid: str, refused: list) -> None:
        """Never a training sample: SGLang put pad values (MM_PAD_SHIFT_VALUE + a hash), not token ids, where
        the request's images go, and the states there are the vision tower's. Refused once per request."""
        self._drop(rid)
        if self._recent.get(rid) != "multimodal":
            refused.append(
                Refusal(
                    rid,
                    "it carries multimodal inputs (their positions hold pad values, not token "
                    "ids); send text-only requests to dump",
                    "multimodal",
                )
            )
            self._remember(rid, "multimodal")

    def restitch(self, rid: str) -> bool:
        """A request whose sample is still in flight (being written) is prefilled again from token 0 (a
        retraction): False = leave the sample as it is. A subclass that holds samples past their prompt
        (dump while serving) may take the new prefill instead."""
        return False

    def release_ended(self, min_missed: int = 0) -> int:
        """Release the partials that missed at least `min_missed` consecutive batches (0: every partial, for a
        writer idle so long that no request can still be mid-prefill). Returns how many."""
        gone = [rid for rid, part in self.partials.items() if self.fed - part.seen >= min_missed]
        for rid in gone:
            self._drop(rid)
            self._remember(rid, "ended")
        self.ended += len(gone)
        return len(gone)

    def _remember(self, rid: str, why: str) -> None:
        self._recent[rid] = why
        if len(self._recent) > RECENT_REFUSED:
            self._recent.popitem(last=False)

    def finish(self, sample: Sample) -> None:
        """The sample was written (or discarded): let go of its pieces, and of its id."""
        for pc in sample.pieces:
            self._unref(pc.batch)
        sample.pieces = []
        with self._active_lock:
            if self._active.get(sample.sample_id) == sample.rid:
                del self._active[sample.sample_id]

    def release_unused(self, batch: ChunkBatch) -> None:
        """A batch that nothing keeps (no piece of it stitched): its host memory goes back now."""
        batch.add_ref()
        self._unref(batch)

    def _unref(self, batch: ChunkBatch) -> None:
        if batch.drop_ref():
            self.release(batch)

    def _drop(self, rid: str) -> None:
        part = self.partials.pop(rid, None)
        if part is not None:
            self.finish(part)

    def drop_all(self) -> None:
        for rid in list(self.partials):
            self._drop(rid)
