"""The held-out samples eval runs on, read with the package's own readers: a training export (`hs_{i}.safetensors`
+ the Arrow dataset's loss masks: training/data.py, training/samples.py) or a dump dir (its manifest and sample
files, checked as `dump export` checks them: dump/export.py).

The held-out split is the one `train` holds out of the same files at --train-ratio 1 - fraction: the draft
layout's rule (draft/arch/<layout>.heldout, written once for the route that trains it and for eval).
A dump dir is taken in sorted id order, the order of `dump export` without --data.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..boundary import BadInput, Refused, read_json_file
from ..dump import export as ex
from ..dump.client_files import generated_loss_masks
from ..dump.config import META_FILE
from ..dump.sample_file import T_AUX, T_IDS
from ..training import data as tdata
from ..training.samples import SampleSpec, load_sample


@dataclasses.dataclass
class Sample:
    name: str
    ids: object  # torch [L] int64
    aux: object  # torch [L, K*H]
    mask: list  # [L] 0/1: 1 = a position the target generated (the region anchors come from)


@dataclasses.dataclass
class Source:
    kind: str  # "export" or "dump"
    root: Path
    n: int
    layer_ids: list | None  # HF hidden_states indices the states were captured at
    layers_from: str
    model_path: str | None  # the target the data was dumped from (its metadata), when recorded
    _load: object = None

    def load(self, i: int, k: int, hidden: int | None, vocab: int) -> Sample:
        return self._load(i, k, hidden, vocab)


def _refuse(e: Exception, flag: str = "--data") -> Refused:
    return Refused(f"{flag}: {e}")


def recorded_model_path(root: Path, names=("sge3_dump_meta.json", "dump_meta.json")) -> str | None:
    """The target folder the dump (or export) beside `root` records, or None."""

    for n in names:
        if (root / n).is_file():
            try:
                mp = read_json_file(root / n, "dump metadata").get("model_path")
            except BadInput:
                return None
            return mp if isinstance(mp, str) and mp else None
    return None


def open_source(data) -> Source:
    """A dump dir (it has dump_meta.json) or a training export (hs_{i}.safetensors files)."""

    root = Path(data)
    if not root.is_dir():
        raise Refused(f"--data {data}: no such directory (a dump dir or a `dump export --to speculators` output)")
    return _dump_source(root) if (root / META_FILE).is_file() else _export_source(root)


def _layer_ids(root: Path):

    try:
        ids, src = tdata.read_layer_ids_from_metadata(root)
    except tdata.TrainDraftError as e:
        raise _refuse(e) from None
    return ids, (f"{root}/{src}" if src else "not recorded beside the data")


def _export_source(root: Path) -> Source:

    try:
        files = tdata.list_hs_files(tdata.find_hs_dir(root))
    except tdata.TrainDraftError as e:
        raise Refused(f"--data {root}: neither a dump dir (no dump_meta.json) nor a training export ({e})") from None
    masks = tdata._existing_loss_masks(root, len(files))
    ids, where = _layer_ids(root)

    def load(i, k, hidden, vocab):
        try:
            tok, hs = load_sample(
                files[i], SampleSpec(k + 1, hidden, vocab, f"{k} aux states (the draft's K) + the final state")
            )
            mask = tdata._loss_mask(masks, i, files[i], tok.tolist(), root)
        except tdata.TrainDraftError as e:
            raise _refuse(e) from None
        L = int(tok.shape[0])
        return Sample(files[i].name, tok, hs[:, :k].reshape(L, -1), mask)

    return Source("export", root, len(files), ids, where, recorded_model_path(root), load)


def _dump_source(root: Path) -> Source:

    try:
        ex.require_dump_dir(root)
        spec = ex.dump_spec(root)
        recs = ex.ordered_records(root)
        gen = generated_loss_masks(root)
    except ex.ExportError as e:
        raise _refuse(e) from None
    ids, where = _layer_ids(root)

    def load(i, k, hidden, vocab):
        where = f"--data {root}: sample {recs[i].get('id')!r} ({root / str(recs[i].get('file'))})"
        problem = dump_shape_problem(spec.n_aux, spec.hidden, spec.vocab, k, hidden, vocab)
        if problem:
            raise Refused(f"{where}: {problem}")
        try:
            t, _ = ex.read_checked(root, recs[i], dataclasses.replace(spec, vocab=vocab or spec.vocab))
            mask = ex.loss_mask(recs[i], int(t[T_IDS].shape[0]), gen)
        except ex.ExportError as e:  # names the sample and its file
            raise _refuse(e) from None
        return Sample(recs[i]["id"], t[T_IDS].long(), t[T_AUX], mask)

    return Source("dump", root, len(recs), ids, where, recorded_model_path(root), load)


def dump_shape_problem(n_aux, width, dump_vocab, k: int, hidden: int | None, vocab: int | None) -> str | None:
    """Why a dump's recorded shapes cannot feed this draft (None: they can); its sample files are checked
    against these shapes as they are read."""
    if n_aux != k:
        return (
            f"the dump holds {n_aux} aux states per token (dump_meta.json), the draft's fc takes K={k}: dump "
            f"with the draft's layers, or evaluate a draft trained on these"
        )
    if hidden is not None and width != hidden:
        return (
            f"the dump's states are {width} wide (dump_meta.json hidden_size), the draft's fc takes {hidden}: "
            f"dumped from another target; evaluate a draft of that target"
        )
    if dump_vocab and vocab and dump_vocab != vocab:
        return (
            f"the dump's vocabulary is {dump_vocab} tokens (dump_meta.json vocab_size), the draft's target "
            f"has {vocab}: dumped from another target; evaluate a draft of that target"
        )
    return None


def heldout(n: int, fraction: float, layout) -> tuple[list[int], str]:
    """(indices, the rule in words) of the samples `train` would not train on: the draft layout's own split
    (draft/arch: heldout) at --train-ratio 1 - fraction; all samples when it holds none out."""
    if fraction >= 1:
        return list(range(n)), f"all {n} samples (--heldout-fraction 1)"
    start, rule = layout.heldout(n, round(1.0 - fraction, 12))
    if start >= n:
        return list(range(n)), f"all {n} sample(s) (trained on): {rule}"
    return list(range(start, n)), rule
