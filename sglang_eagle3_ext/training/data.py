"""The hidden-state files both trainers read (`hs_{i}.safetensors`: token_ids [L], hidden_states [L, K+1, H]),
the aux layer ids recorded beside them, and speculators' Arrow dataset built from them (train_draft.py)."""
from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

META_FILES = ("metadata.json", "sge3_dump_meta.json", "dump_meta.json")
META_KEYS = ("hf_hidden_state_indices", "layer_indices_hf", "eagle_aux_hidden_state_layer_ids",
             "aux_hidden_state_layer_ids", "target_layer_ids", "layer_ids")
_HS_RE = re.compile(r"^hs_(\d+)\.safetensors$")

log = logging.getLogger("sglang_eagle3_ext.train_draft")


class TrainDraftError(RuntimeError):
    pass


def _say(msg: str) -> None:
    print(f"[train_draft] {msg}", flush=True)


def require_learned(val_acc: float | None, min_acc: float, out: Path) -> None:
    """Fail the run when the draft's validation accuracy (first speculative step) is <= min_acc: a draft that
    did not learn otherwise shows up only later, as an accept length of ~1 when served (issue #18)."""
    if min_acc <= 0 or val_acc is None or val_acc != val_acc:      # disabled, or no validation split (NaN)
        return
    if val_acc <= min_acc:
        raise TrainDraftError(f"the trained draft's validation accuracy is {val_acc:.4f} (<= --min-val-acc "
                              f"{min_acc}): it did not learn and would serve at an accept length of ~1; "
                              f"checkpoint kept in {out}; train longer / with another --lr, or check the data")


# ----------------------------------------------------------------------------- data preparation

def find_hs_dir(data: Path) -> Path:
    for d in (data / "hidden_states", data):
        if d.is_dir() and any(_HS_RE.match(p.name) for p in d.iterdir()):
            return d
    raise TrainDraftError(f"no hs_{{i}}.safetensors files in {data} or {data / 'hidden_states'}")


def list_hs_files(hs_dir: Path) -> list[Path]:
    """hs_0..hs_{N-1} in index order; speculators maps dataset row i to hs_i, so gaps are refused."""
    idx = sorted(int(m.group(1)) for p in hs_dir.iterdir() if (m := _HS_RE.match(p.name)))
    if idx != list(range(len(idx))):
        missing = sorted(set(range(idx[-1] + 1)) - set(idx))[:5]
        raise TrainDraftError(f"{hs_dir}: hs files are not contiguous from hs_0 (missing e.g. {missing}); "
                              f"speculators reads row i from hs_i")
    return [hs_dir / f"hs_{i}.safetensors" for i in idx]


def read_layer_ids_from_metadata(data: Path) -> tuple[list[int] | None, str | None]:
    for d in (data, data / "hidden_states"):
        for name in META_FILES:
            p = d / name
            if not p.is_file():
                continue
            try:
                meta = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            for holder in (meta, meta.get("eagle_config") or {}):
                for k in META_KEYS:
                    if holder.get(k):
                        return [int(x) for x in holder[k]], f"{p.name}:{k}"
    return None, None


def parse_layer_ids(text: str | None) -> list[int] | None:
    if not text:
        return None
    return [int(x) for x in re.split(r"[,\s]+", text.strip()) if x]


def _existing_loss_masks(data: Path, n: int):
    """Row-aligned loss masks from an Arrow dataset already in DIR (the dump exporter writes one)."""
    if not (data / "state.json").exists() and not (data / "dataset_info.json").exists():
        return None
    try:
        import datasets

        ds = datasets.load_from_disk(str(data))
        if len(ds) != n or "loss_mask" not in ds.column_names or "input_ids" not in ds.column_names:
            return None
        return ds.with_format(None)
    except Exception as e:  # noqa: BLE001 - an unreadable optional side file must not stop training
        log.warning("ignoring the Arrow dataset in %s: %s", data, e)
        return None


def prepare_data(data: Path, hs_files: list[Path], prep: Path, n_slots_expected: int | None,
                 vocab_size: int) -> dict:
    """Write speculators' Arrow dataset (input_ids, loss_mask, seq_len) + token_freq.pt into `prep`."""
    import datasets
    import torch
    from safetensors import safe_open

    existing = _existing_loss_masks(data, len(hs_files))
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    freq = torch.zeros(vocab_size, dtype=torch.long)
    n_slots = hidden = None
    used_existing = 0
    for i, p in enumerate(hs_files):
        with safe_open(str(p), framework="pt") as f:
            keys = set(f.keys())
            if not {"token_ids", "hidden_states"} <= keys:
                raise TrainDraftError(f"{p.name}: needs keys token_ids and hidden_states, has {sorted(keys)}")
            ids = f.get_tensor("token_ids").long()
            shape = f.get_slice("hidden_states").get_shape()
        if len(shape) != 3 or shape[0] != ids.shape[0]:
            raise TrainDraftError(f"{p.name}: hidden_states {shape} does not match token_ids [{ids.shape[0]}] "
                                  f"(expected [L, n_layers, H])")
        if n_slots is None:
            n_slots, hidden = shape[1], shape[2]
        elif (shape[1], shape[2]) != (n_slots, hidden):
            raise TrainDraftError(f"{p.name}: hidden_states {shape} differs from hs_0's [L, {n_slots}, {hidden}]")
        if int(ids.max()) >= vocab_size or int(ids.min()) < 0:
            raise TrainDraftError(f"{p.name}: token id out of the target vocab [0, {vocab_size})")
        L = int(ids.shape[0])
        mask = [1] * L
        if existing is not None:
            row = existing[i]
            if list(row["input_ids"]) == ids.tolist() and len(row["loss_mask"]) == L:
                mask = [int(x) for x in row["loss_mask"]]
                used_existing += 1
        rows["input_ids"].append(ids.tolist())
        rows["loss_mask"].append(mask)
        rows["seq_len"].append(L)
        m = torch.tensor(mask, dtype=torch.bool)
        freq += torch.bincount(ids[m], minlength=vocab_size)
    if n_slots_expected is not None and n_slots != n_slots_expected:
        raise TrainDraftError(f"hs files carry {n_slots} slots per token but {n_slots_expected - 1} aux layer ids "
                              f"+ the final state were given: layer ids and the dump disagree")
    if prep.exists():
        shutil.rmtree(prep)
    prep.mkdir(parents=True)
    ds = datasets.Dataset.from_dict(rows).with_format("torch")
    ds.save_to_disk(str(prep))
    token_freq = {int(t): int(c) for t, c in enumerate(freq.tolist()) if c}
    torch.save(token_freq, prep / "token_freq.pt")
    return {"n_samples": len(hs_files), "n_tokens": sum(rows["seq_len"]), "n_slots": n_slots,
            "hidden_size": hidden, "loss_mask_from_dataset": used_existing,
            "n_loss_tokens": int(freq.sum())}
