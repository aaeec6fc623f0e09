"""The hidden-state files both trainers read (`hs_{i}.safetensors`: token_ids [L], hidden_states [L, K+1, H]),
the aux layer ids recorded beside them, and speculators' Arrow dataset built from them (the Llama route)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..boundary import BadInput, Refused, list_of, read_json_file
from .report import TrainDraftError, say
from .samples import SampleSpec, load_sample

META_FILES = ("metadata.json", "sge3_dump_meta.json", "dump_meta.json")
META_KEYS = (
    "hf_hidden_state_indices",
    "layer_indices_hf",
    "eagle_aux_hidden_state_layer_ids",
    "aux_hidden_state_layer_ids",
    "target_layer_ids",
    "layer_ids",
)
_HS_RE = re.compile(r"^hs_(0|[1-9][0-9]*)\.safetensors$")

log = logging.getLogger("sglang_eagle3_ext.train_draft")


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
        raise TrainDraftError(
            f"{hs_dir}: hs files are not contiguous from hs_0 (missing e.g. {missing}); "
            f"speculators reads row i from hs_i"
        )
    return [hs_dir / f"hs_{i}.safetensors" for i in idx]


def read_layer_ids_from_metadata(data: Path) -> tuple[list[int] | None, str | None]:
    """The aux layer ids recorded beside the files (the first metadata file that names them). A metadata file
    that is there but unreadable, or whose ids are not integers >= 0, is refused: falling back to a default
    would train on other layers than the files hold."""

    for d in (data, data / "hidden_states"):
        for name in META_FILES:
            p = d / name
            if not os.path.lexists(p):
                continue
            try:
                meta = read_json_file(p, "hidden-state metadata")
                ec = meta.get("eagle_config")
                for holder in (meta, ec if isinstance(ec, dict) else {}):
                    for k in META_KEYS:
                        if holder.get(k):
                            where = f"{p}: {k!r}"
                            return list(list_of(holder[k], int, where, minimum=0)), f"{p.name}:{k}"
            except BadInput as e:
                raise TrainDraftError(f"{e}; fix the file or pass --layer-ids") from None
    return None, None


def parse_layer_ids(text) -> list[int] | None:
    """--layer-ids as given: None/empty (not given), "1,2,3", or a list of integers (a Python caller)."""
    if not text:
        return None
    if isinstance(text, (list, tuple)):
        text = ",".join(str(x) if isinstance(x, int) and not isinstance(x, bool) else "?" for x in text)
    parts = [x for x in re.split(r"[,\s]+", text.strip()) if x]
    if not parts or not all(re.fullmatch(r"[0-9]+", x) for x in parts):
        raise TrainDraftError(
            f"--layer-ids {text!r}: expected HF hidden_states indices, integers >= 0 separated by commas (e.g. 1,2,3)"
        )
    return [int(x) for x in parts]


def _existing_loss_masks(data: Path, n: int):
    """Row-aligned loss masks from an Arrow dataset already in DIR (the dump exporter writes one)."""
    if not (data / "state.json").exists() and not (data / "dataset_info.json").exists():
        return None
    try:
        import datasets

        ds = datasets.load_from_disk(str(data))
        if "loss_mask" not in ds.column_names or "input_ids" not in ds.column_names:
            say(f"ignoring the Arrow dataset in {data}: no input_ids/loss_mask columns; training on every token")
            return None
        if len(ds) != n:
            say(f"ignoring the Arrow dataset in {data}: {len(ds)} rows for {n} hs files; training on every token")
            return None
        return ds.with_format(None)
    except Exception as e:  # noqa: BLE001 - an unreadable optional side file must not stop training
        log.warning("ignoring the Arrow dataset in %s: %s", data, e)
        return None


def _loss_mask(existing, i: int, p: Path, ids: list, data: Path) -> list[int]:
    """Row i's loss mask from the dataset exported with the files; its token ids must be the file's."""
    L = len(ids)
    if existing is None:
        return [1] * L
    row = existing[i]
    mask = row["loss_mask"]
    if list(row["input_ids"]) != ids:
        raise TrainDraftError(
            f"{p}: its token_ids differ from row {i} of the Arrow dataset in {data}, whose "
            f"loss_mask it would take: the two were not exported together; re-export, or remove "
            f"the dataset's files from {data} to train on every token"
        )
    if not isinstance(mask, list) or len(mask) != L or any(x not in (0, 1) or isinstance(x, float) for x in mask):
        raise TrainDraftError(
            f"{p}: row {i} of the Arrow dataset in {data} has a loss_mask that is not {L} "
            f"values of 0/1; re-export the data"
        )
    return [int(x) for x in mask]


def prepare_data(
    data: Path,
    hs_files: list[Path],
    prep: Path,
    n_slots_expected: int | None,
    vocab_size: int,
    hidden_size: int | None = None,
    slots_from: str = "",
) -> dict:
    """Check every file (training/samples.py), then write speculators' Arrow dataset (input_ids, loss_mask,
    seq_len) + token_freq.pt into `prep`."""
    import torch

    existing = _existing_loss_masks(data, len(hs_files))
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    freq = torch.zeros(vocab_size, dtype=torch.long)
    spec = SampleSpec(n_slots_expected, hidden_size, vocab_size, slots_from)
    used_existing = 0
    for i, p in enumerate(hs_files):
        ids, hs = load_sample(p, spec)
        if spec.n_slots is None or spec.hidden is None:
            spec = SampleSpec(int(hs.shape[1]), int(hs.shape[2]), vocab_size, f"as {p.name}")
        ids_list = ids.tolist()
        mask = _loss_mask(existing, i, p, ids_list, data)
        used_existing += existing is not None
        rows["input_ids"].append(ids_list)
        rows["loss_mask"].append(mask)
        rows["seq_len"].append(len(ids_list))
        freq += torch.bincount(ids[torch.tensor(mask, dtype=torch.bool)], minlength=vocab_size)
    _write_prepared(prep, rows, freq)
    return {
        "n_samples": len(hs_files),
        "n_tokens": sum(rows["seq_len"]),
        "n_slots": spec.n_slots,
        "hidden_size": spec.hidden,
        "loss_mask_from_dataset": used_existing,
        "n_loss_tokens": int(freq.sum()),
    }


def _write_prepared(prep: Path, rows: dict, freq) -> None:
    import datasets
    import torch

    prep.mkdir(parents=True)
    ds = datasets.Dataset.from_dict(rows).with_format("torch")
    ds.save_to_disk(str(prep))
    token_freq = {int(t): int(c) for t, c in enumerate(freq.tolist()) if c}
    torch.save(token_freq, prep / "token_freq.pt")


# ----------------------------------------------------------------------------- the target layers --data holds


def captured_layers(data: str) -> tuple[list[int], str]:
    """(the HF indices --data holds, the file recording them): the metadata `train` reads them from."""
    try:
        ids, src = read_layer_ids_from_metadata(Path(data))
    except TrainDraftError as e:
        raise Refused(f"--data {data}: {e}") from None
    if ids is None:
        raise Refused(
            f"--data {data}: records no target layers (no dump_meta.json or metadata.json naming them); "
            f"give the dump dir or the `dump export` output the draft was trained on"
        )
    return ids, f"--data {data} ({src})"
