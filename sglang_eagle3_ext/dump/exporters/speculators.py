"""speculators' layout: <out>/hidden_states/hs_{i}.safetensors {token_ids [L] int64, hidden_states [L, K+1, H]},
the last slot = the final state BEFORE the last norm; plus an Arrow dataset at <out> (input_ids, loss_mask,
seq_len; speculators' ArrowDataset(datapath=<out>)) and index.jsonl."""

from __future__ import annotations

import os
from pathlib import Path

from ..export import ExportError, export_into, loss_mask, map_samples, ordered_records, read_checked, write_index
from ..sample_file import T_AUX, T_IDS, T_PRE, atomic_write


def export_speculators(
    dump_dir,
    out,
    order=None,
    loss_masks: dict | None = None,
    arrow: bool = True,
    workers: int = 1,
    progress: bool = False,
) -> int:
    return export_into(
        _build,
        "speculators",
        dump_dir,
        out,
        order=order,
        loss_masks=loss_masks,
        arrow=arrow,
        workers=workers,
        progress=progress,
    )


def _build(
    dump_dir: Path,
    out: Path,
    spec,
    order=None,
    loss_masks: dict | None = None,
    arrow: bool = True,
    workers: int = 1,
    progress: bool = False,
) -> int:
    recs = ordered_records(dump_dir, order)
    hs_dir = out / "hidden_states"
    hs_dir.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    index = []

    def one(i, rec):
        t, meta = read_checked(dump_dir, rec, spec)
        if T_PRE not in t:
            raise ExportError(
                f"{rec['file']}: speculators needs the final state before the norm; this dump was "
                f"made with SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm"
            )
        L, KH = t[T_AUX].shape
        H = t[T_PRE].shape[1]
        hs = __import__("torch").cat([t[T_AUX].view(L, KH // H, H), t[T_PRE].view(L, 1, H)], 1).contiguous()
        ids = t[T_IDS].long().contiguous()
        atomic_write(hs_dir / f"hs_{i}.safetensors", lambda p: save_file({"token_ids": ids, "hidden_states": hs}, p))
        lm = loss_mask(rec, L, loss_masks)
        return ids.tolist(), [int(x) for x in lm], L

    for i, (rec, (ids, lm, L)) in enumerate(zip(recs, map_samples(recs, one, workers, progress, "export speculators"))):
        rows["input_ids"].append(ids)
        rows["loss_mask"].append(lm)
        rows["seq_len"].append(L)
        index.append({"i": i, "id": rec["id"], "num_tokens": L})
    write_index(out, index, dump_dir)
    if arrow:
        _write_arrow(out, rows)
    return len(recs)


def _write_arrow(out: Path, rows: dict) -> None:
    import datasets

    ds = datasets.Dataset.from_dict(rows)
    ds = ds.with_format("torch")
    ds.save_to_disk(str(out / "_arrow_tmp"))
    for f in (out / "_arrow_tmp").iterdir():  # speculators wants the Arrow files and hidden_states/ side by side
        os.replace(f, out / f.name)
    (out / "_arrow_tmp").rmdir()
