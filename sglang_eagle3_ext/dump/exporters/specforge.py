"""SpecForge's layout: <out>/rows_{g}-{g+2000}/data_{i}.ckpt  torch.save({input_ids [L], loss_mask [L],
hidden_state [1, L, H] AFTER the last norm, aux_hidden_state [1, L, K*H]}), plus index.jsonl."""

from __future__ import annotations

from pathlib import Path

from ..export import (
    export_into,
    final_states,
    load_norm,
    loss_mask,
    map_samples,
    ordered_records,
    read_checked,
    write_index,
)
from ..sample_file import T_AUX, T_IDS, atomic_write

SPECFORGE_GROUP = 2000


def export_specforge(
    dump_dir, out, order=None, loss_masks: dict | None = None, workers: int = 1, progress: bool = False
) -> int:
    return export_into(
        _build, "specforge", dump_dir, out, order=order, loss_masks=loss_masks, workers=workers, progress=progress
    )


def _build(
    dump_dir: Path,
    out: Path,
    spec,
    order=None,
    loss_masks: dict | None = None,
    workers: int = 1,
    progress: bool = False,
) -> int:
    import torch

    recs = ordered_records(dump_dir, order)
    norm = load_norm(dump_dir, spec.hidden)

    def one(i, rec):
        t, meta = read_checked(dump_dir, rec, spec)
        _, post = final_states(t, norm, rec["file"])
        L = t[T_IDS].shape[0]
        lm = loss_mask(rec, L, loss_masks)
        record = {
            "input_ids": t[T_IDS].long().clone(),
            "loss_mask": torch.tensor(lm, dtype=torch.long),
            "hidden_state": post.unsqueeze(0).contiguous(),
            "aux_hidden_state": t[T_AUX].unsqueeze(0).contiguous(),
        }
        g = i // SPECFORGE_GROUP * SPECFORGE_GROUP
        path = out / f"rows_{g}-{g + SPECFORGE_GROUP}" / f"data_{i}.ckpt"
        atomic_write(path, lambda p: torch.save(record, p))
        return {"i": i, "id": rec["id"], "num_tokens": L}

    index = map_samples(recs, one, workers, progress, "export specforge")
    write_index(out, index, dump_dir)
    return len(recs)
