"""Convert a native dump into the layouts training tools read.

speculators: <out>/hidden_states/hs_{i}.safetensors  {token_ids [L] int64, hidden_states [L, K+1, H]},
             the last slot = final state BEFORE the last norm; plus an Arrow dataset at <out>
             (input_ids, loss_mask, seq_len; speculators' ArrowDataset(datapath=<out>)) and index.jsonl.
SpecForge:   <out>/rows_{g}-{g+2000}/data_{i}.ckpt  torch.save({input_ids [L], loss_mask [L],
             hidden_state [1, L, H] AFTER the last norm, aux_hidden_state [1, L, K*H]})
Sample i is the i-th id in `order` (e.g. the dataset's line order), else sorted ids.

Safety: --dump-dir must be a dump dir (it has dump_meta.json); every file read from it must resolve inside
it (a manifest line naming /etc/passwd or ../x is refused). The export is built in a temporary directory
beside --out and renamed into place: an --out holding an earlier export of ours is replaced as a whole (no
stale hs_N files of a larger older export survive), any other non-empty --out is refused.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .config import META_FILE, NORM_FILE
from .sample_file import T_AUX, T_IDS, T_POST, T_PRE, atomic_write, read_sample
from .manifest import read_manifest
from .serving_mode import default_loss_mask

SPECFORGE_GROUP = 2000
EXPORT_MARKER = "sge3_export.json"     # in every --out we wrote: what may be replaced by a new export


def rms_norm(x, weight, eps: float):
    """The model's final RMSNorm in fp32 (as SGLang's kernels compute it), cast back to x's dtype."""
    import torch

    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


class ExportError(RuntimeError):
    pass


def inside(dump_dir, rel) -> Path:
    """dump_dir/rel, resolved (symlinks too); ExportError when that is not inside dump_dir."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise ExportError(f"{dump_dir}: manifest entry file={rel!r} is not a relative path")
    root = Path(dump_dir).resolve()
    p = (root / rel).resolve()
    if root not in p.parents:
        raise ExportError(f"{dump_dir}: file {rel!r} resolves to {p}, outside the dump dir: refusing to read it "
                          f"(a manifest or file that did not come from the dump writer)")
    return p


def require_dump_dir(path) -> Path:
    """`path` when it is a dump dir (made by the dump writer: it has dump_meta.json), else ExportError."""
    d = Path(path)
    if not d.is_dir():
        raise ExportError(f"--dump-dir {path}: no such directory")
    if not (d / META_FILE).is_file():
        raise ExportError(f"--dump-dir {path}: not a dump dir (no {META_FILE}); give the directory the server "
                          f"dumped into (its SGLANG_EAGLE3_EXT_DUMP_DIR)")
    inside(d, META_FILE)
    return d


def _is_our_export(out: Path) -> bool:
    if (out / EXPORT_MARKER).is_file():
        return True
    # exports made before the marker: an index plus the dump's metadata copied beside it
    return (out / "index.jsonl").is_file() and (out / "sge3_dump_meta.json").is_file()


def _staging_dir(out: Path, dump_dir: Path) -> Path:
    """A fresh directory beside `out` to build the export in; refuses an --out that is not ours to replace."""
    o, d = out.resolve(), dump_dir.resolve()
    if o == d or d in o.parents or o in d.parents:
        raise ExportError(f"--out {out} must be outside the dump dir {dump_dir} and must not contain it")
    if out.is_symlink() or out.exists():
        if not out.is_dir() or out.is_symlink():
            raise ExportError(f"--out {out} exists and is {'a symlink' if out.is_symlink() else 'not a directory'}; "
                              f"choose a new directory")
        if any(out.iterdir()) and not _is_our_export(out):
            raise ExportError(f"--out {out} is not empty and holds no export of this tool (no {EXPORT_MARKER}); "
                              f"choose a new or empty directory (nothing there was changed)")
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.export-tmp.", dir=out.parent))


def _into_place(tmp: Path, out: Path) -> None:
    """Rename the finished export to `out`; an earlier export there is moved aside first, then deleted."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.export-old.{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _export(build, to: str, dump_dir, out, **kw) -> int:
    dump_dir, out = require_dump_dir(dump_dir), Path(out)
    tmp = _staging_dir(out, dump_dir)
    try:
        n = build(dump_dir, tmp, **kw)
        (tmp / EXPORT_MARKER).write_text(json.dumps({"format": "sge3_export", "to": to, "samples": n,
                                                     "dump_dir": str(dump_dir.resolve())}) + "\n")
        _into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return n


def _load_norm(dump_dir):
    if not (Path(dump_dir) / NORM_FILE).exists():
        return None
    p = inside(dump_dir, NORM_FILE)
    from safetensors import safe_open

    with safe_open(str(p), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get("sge3_norm", "{}"))
        return f.get_tensor("weight"), float(meta["eps"])


def _read(dump_dir: Path, rec: dict):
    """A sample as captured: compact encodings (SGLANG_EAGLE3_EXT_DUMP_ENCODING=fp8) are decoded here, so
    exports are always in the captured dtype (bf16) whatever the dump's encoding."""
    from .encoding import EncodingError

    try:
        return read_sample(inside(dump_dir, rec["file"]))
    except EncodingError as e:
        raise ExportError(f"{rec['file']}: {e}") from e


def ordered_records(dump_dir, order: list[str] | None = None) -> list[dict]:
    man = read_manifest(dump_dir)
    if order is None:
        return [man[k] for k in sorted(man)]
    missing = [k for k in order if k not in man]
    if missing:
        raise ExportError(f"{len(missing)} ids of the given order are not in the manifest (e.g. {missing[:3]}); "
                          f"re-run the dump client to complete them, or export without --data")
    return [man[k] for k in order]


def _finals(t: dict, norm, path) -> tuple:
    pre = t.get(T_PRE)
    post = t.get(T_POST)
    if post is None and pre is not None:
        if norm is None:
            raise ExportError(f"{path}: no post-norm state and no {NORM_FILE} to derive it")
        post = rms_norm(pre, norm[0], norm[1])
    return pre, post


def export_speculators(dump_dir, out, order=None, loss_masks: dict | None = None, arrow: bool = True,
                       workers: int = 1, progress: bool = False) -> int:
    return _export(_speculators_into, "speculators", dump_dir, out, order=order, loss_masks=loss_masks, arrow=arrow,
                   workers=workers, progress=progress)


def export_specforge(dump_dir, out, order=None, loss_masks: dict | None = None, workers: int = 1,
                     progress: bool = False) -> int:
    return _export(_specforge_into, "specforge", dump_dir, out, order=order, loss_masks=loss_masks, workers=workers,
                   progress=progress)


def _map_samples(recs: list, fn, workers: int = 1, progress: bool = False, desc: str = "export") -> list:
    """[fn(i, rec) for each record] in record order, `workers` at a time (threads: the file reads and writes
    and the tensor copies release the GIL); a tqdm bar on stderr with `progress`. The first error stops it."""
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(recs), unit="sample", desc=desc, dynamic_ncols=True)
        except ImportError:  # the export runs without a bar
            bar = None

    def one(i):
        r = fn(i, recs[i])
        if bar is not None:
            bar.update(1)
        return r

    try:
        if workers <= 1:
            return [one(i) for i in range(len(recs))]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as ex:
            futs = [ex.submit(one, i) for i in range(len(recs))]
            try:
                return [f.result() for f in futs]
            except BaseException:
                for f in futs:
                    f.cancel()
                raise
    finally:
        if bar is not None:
            bar.close()


def _speculators_into(dump_dir: Path, out: Path, order=None, loss_masks: dict | None = None, arrow: bool = True,
                      workers: int = 1, progress: bool = False) -> int:
    recs = ordered_records(dump_dir, order)
    hs_dir = out / "hidden_states"
    hs_dir.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file

    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    index = []

    def one(i, rec):
        t, meta = _read(dump_dir, rec)
        if T_PRE not in t:
            raise ExportError(f"{rec['file']}: speculators needs the final state before the norm; this dump was "
                              f"made with SGLANG_EAGLE3_EXT_DUMP_FINAL=postnorm")
        L, KH = t[T_AUX].shape
        H = t[T_PRE].shape[1]
        hs = __import__("torch").cat([t[T_AUX].view(L, KH // H, H), t[T_PRE].view(L, 1, H)], 1).contiguous()
        ids = t[T_IDS].long().contiguous()
        atomic_write(hs_dir / f"hs_{i}.safetensors", lambda p: save_file({"token_ids": ids, "hidden_states": hs}, p))
        lm = (loss_masks or {}).get(rec["id"]) or default_loss_mask(rec, L)   # serving samples: the response
        if len(lm) != L:
            raise ExportError(f"loss_mask of {rec['id']} has {len(lm)} entries, sample has {L} tokens")
        return ids.tolist(), [int(x) for x in lm], L

    for i, (rec, (ids, lm, L)) in enumerate(zip(recs, _map_samples(recs, one, workers, progress, "export speculators"))):
        rows["input_ids"].append(ids)
        rows["loss_mask"].append(lm)
        rows["seq_len"].append(L)
        index.append({"i": i, "id": rec["id"], "num_tokens": L})
    _write_index(out, index, dump_dir)
    if arrow:
        import datasets

        ds = datasets.Dataset.from_dict(rows)
        ds = ds.with_format("torch")
        ds.save_to_disk(str(out / "_arrow_tmp"))
        for f in (out / "_arrow_tmp").iterdir():   # speculators wants the Arrow files and hidden_states/ side by side
            os.replace(f, out / f.name)
        (out / "_arrow_tmp").rmdir()
    return len(recs)


def _specforge_into(dump_dir: Path, out: Path, order=None, loss_masks: dict | None = None, workers: int = 1,
                    progress: bool = False) -> int:
    import torch

    recs = ordered_records(dump_dir, order)
    norm = _load_norm(dump_dir)

    def one(i, rec):
        t, meta = _read(dump_dir, rec)
        _, post = _finals(t, norm, rec["file"])
        L = t[T_IDS].shape[0]
        lm = (loss_masks or {}).get(rec["id"]) or default_loss_mask(rec, L)   # serving samples: the response
        if len(lm) != L:
            raise ExportError(f"loss_mask of {rec['id']} has {len(lm)} entries, sample has {L} tokens")
        record = {"input_ids": t[T_IDS].long().clone(), "loss_mask": torch.tensor(lm, dtype=torch.long),
                  "hidden_state": post.unsqueeze(0).contiguous(), "aux_hidden_state": t[T_AUX].unsqueeze(0).contiguous()}
        g = i // SPECFORGE_GROUP * SPECFORGE_GROUP
        path = out / f"rows_{g}-{g + SPECFORGE_GROUP}" / f"data_{i}.ckpt"
        atomic_write(path, lambda p: torch.save(record, p))
        return {"i": i, "id": rec["id"], "num_tokens": L}

    index = _map_samples(recs, one, workers, progress, "export specforge")
    _write_index(out, index, dump_dir)
    return len(recs)


def _write_index(out: Path, index: list, dump_dir: Path) -> None:
    data = "".join(json.dumps(r) + "\n" for r in index).encode()

    def w(p):
        with open(p, "wb") as fh:
            fh.write(data)
    atomic_write(out / "index.jsonl", w)
    if (dump_dir / META_FILE).exists():
        src = inside(dump_dir, META_FILE).read_bytes()

        def wm(p):
            with open(p, "wb") as fh:
                fh.write(src)
        atomic_write(out / "sge3_dump_meta.json", wm)
