"""The samples a refresh trains and judges on: what the dump holds that the cursor does not, optionally only the
requests the draft served badly, split into a training part and a held-out part by a hash of each sample id (so a
run repeated on the same samples splits them the same way)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math

from ..boundary import BadInput, Refused
from ..dump.manifest import read_manifest


@dataclasses.dataclass
class Selection:
    train: list  # sample ids, in the dump's order (time written, then id)
    heldout: list
    new: int  # samples the cursor does not hold
    skipped: dict  # reason -> count

    @property
    def ids(self) -> list:
        return self.train + self.heldout


def _unit(sample_id: str) -> float:
    """A number in [0, 1) fixed by the id."""
    return int.from_bytes(hashlib.sha1(sample_id.encode()).digest()[:8], "big") / 2.0**64


def _finite(v) -> float | None:
    """A manifest record's number (its write time, its accept length), or None when it is not a finite one."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def select(dump_dir, consumed: set, heldout_fraction: float, max_accept_len: float | None = None) -> Selection:
    """The unused samples of `dump_dir`; with `max_accept_len`, only those whose request's own accept length
    (recorded by a dump while serving EAGLE-3) was below it."""

    try:
        records = read_manifest(dump_dir)
    except BadInput as e:
        raise Refused(f"dump dir {dump_dir}: {e}") from None
    fresh = [r for k, r in records.items() if k not in consumed]
    fresh.sort(key=lambda r: (_finite(r.get("t")) or 0.0, r["id"]))  # in the order written
    skipped = collections.Counter()
    if max_accept_len is not None:
        kept = []
        for r in fresh:
            acc = _finite(r.get("accept_len"))
            if acc is None:
                skipped["no accept length recorded (not served with EAGLE-3)"] += 1
            elif acc >= max_accept_len:
                skipped[f"accept length >= {max_accept_len:g}"] += 1
            else:
                kept.append(r)
        fresh = kept
    heldout = [r["id"] for r in fresh if _unit(r["id"]) < heldout_fraction]
    train = [r["id"] for r in fresh if _unit(r["id"]) >= heldout_fraction]
    if fresh and not heldout:  # a small selection still needs something to judge on
        heldout, train = [train[-1]], train[:-1]
    return Selection(train, heldout, len(records) - len(consumed & set(records)), dict(skipped))


BAD_SAMPLE = "not a training sample (unreadable, of other shapes, or NaN/Inf)"


def check_samples(dump_dir, sel: Selection, workers: int = 1) -> tuple[Selection, list[dict]]:
    """Every selected sample read and checked as the export reads it (dump/sample_file.sample_problem against
    dump_meta.json): those that are no training sample are left out of `sel` (counted under `skipped`; they stay
    unused, judged again by the next refresh). Returns the selection kept and one {"id", "problem"} per sample
    left out."""
    from ..dump.export import ExportError, dump_spec, inside, map_samples
    from ..dump.sample_file import T_IDS, read_sample, sample_problem

    try:
        spec, records = dump_spec(dump_dir), read_manifest(dump_dir)
    except (ExportError, BadInput) as e:
        raise Refused(f"dump dir {dump_dir}: {e}") from None

    def problem(_, rec: dict) -> dict | None:
        try:
            t, _meta = read_sample(inside(dump_dir, rec["file"]))
        except Exception as e:  # noqa: BLE001 - safetensors, JSON, encoding and path errors alike: unreadable
            return {"id": rec["id"], "problem": f"{rec['file']}: unreadable ({type(e).__name__}: {e})"[:300]}
        why = sample_problem(
            t, n_aux=spec.n_aux, hidden=spec.hidden, final=spec.final, dtype=spec.dtype, vocab=spec.vocab
        )
        n = int(t[T_IDS].shape[0]) if why is None else None
        if why is None and rec.get("num_tokens", n) != n:
            why = f"its manifest line says {rec['num_tokens']} tokens, the file holds {n}"
        return None if why is None else {"id": rec["id"], "problem": f"{rec['file']}: {why}"}

    bad = [b for b in map_samples([records[i] for i in sel.ids], problem, workers) if b]
    if not bad:
        return sel, []
    out = {b["id"] for b in bad}
    train, heldout = [i for i in sel.train if i not in out], [i for i in sel.heldout if i not in out]
    if train and not heldout:  # still something to judge on
        heldout, train = [train[-1]], train[:-1]
    skipped = dict(sel.skipped)
    skipped[BAD_SAMPLE] = len(bad)
    return Selection(train, heldout, sel.new, skipped), bad
