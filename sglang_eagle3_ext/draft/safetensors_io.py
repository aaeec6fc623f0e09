"""Header-only reading of .safetensors files: 8-byte little-endian length + JSON header + data.

Fast on multi-GB drafts (reads a few KB per file) and needs neither torch nor SGLang; small
tensors (d2t) and the value scan (`check`'s default) read their bytes through a memory map.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path

from ..boundary import BadInput, field, parse_json, read_json_file, regular_file
from .errors import BAD_FILE, NO_WEIGHTS, PICKLE_ONLY, Problem

DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
INT_DTYPES = {"I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64"}
_MAX_HEADER = 100 * 1024 * 1024
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    begin: int  # absolute byte offsets in the file
    end: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _entry(name: str, meta, data_start: int, path: Path) -> tuple[TensorInfo | None, str | None]:
    """One header entry as a TensorInfo, or what is wrong with it."""
    if not isinstance(meta, dict) or not {"dtype", "shape", "data_offsets"} <= set(meta):
        return None, f"header entry {name!r} is not an object with dtype, shape and data_offsets"
    dtype, shape, offsets = meta["dtype"], meta["shape"], meta["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        return None, f"tensor {name} has dtype {dtype!r}, which safetensors does not know"
    ints = lambda v: isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)  # noqa: E731 - no bools
    if not ints(shape):
        return None, f"tensor {name} has shape {shape!r}; expected a list of integers >= 0"
    if not (ints(offsets) and len(offsets) == 2):
        return None, f"tensor {name} has data_offsets {offsets!r}; expected [begin, end], integers >= 0"
    b, e = offsets
    if b > e:
        return None, f"tensor {name} has data_offsets [{b}, {e}] (begin after end)"
    return TensorInfo(name, dtype, tuple(shape), path, data_start + b, data_start + e), None


def _header_json(path: Path) -> tuple[dict | None, int, str | None]:
    """(parsed header, data start, None) or (None, 0, what is wrong). A FIFO, special file or folder is refused by name
    (reading one would block or mislead)."""

    try:
        size = regular_file(path, "safetensors file").stat().st_size
        if size < 8:
            return None, 0, f"only {size} bytes"
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > min(size - 8, _MAX_HEADER):
                return None, 0, f"header length field says {n} bytes but the file has {size - 8} after it"
            raw = f.read(n)
        header = parse_json(raw, "", "header", expect=None)
    except BadInput as e:
        return None, 0, e.problem
    except OSError as e:
        return None, 0, f"cannot be read ({e.strerror or e})"
    if not isinstance(header, dict):
        return None, 0, "header is not a JSON object"
    return header, 8 + n, None


def read_header(path: Path) -> tuple[dict[str, TensorInfo], list[Problem]]:
    """Tensors described by the header, or a BAD_FILE problem saying what is wrong with the file."""
    path = Path(path)

    def bad(why: str):
        return {}, [
            Problem(
                BAD_FILE,
                f"{path}: {why}; the file is truncated or not safetensors — "
                f"re-copy/re-download it or re-save the draft",
            )
        ]

    header, data_start, why = _header_json(path)
    if header is None:
        return bad(why)
    size = path.stat().st_size
    out, problems = {}, []
    for name, meta in header.items():
        if name == "__metadata__":
            if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
                return bad("__metadata__ must map strings to strings")
            continue
        info, why = _entry(name, meta, data_start, path)
        if info is None:
            return bad(why)
        want = info.numel * DTYPE_BYTES[info.dtype]
        if info.end - info.begin != want:
            problems.append(
                Problem(
                    BAD_FILE,
                    f"{path}: tensor {name} {info.dtype}{list(info.shape)} needs {want} "
                    f"bytes, header gives {info.end - info.begin}",
                    key=name,
                )
            )
        if info.end > size:
            return bad(f"tensor {name} ends at byte {info.end} but the file has {size} bytes")
        out[name] = info
    # safetensors' own rule (and SGLang's loader through it): the tensors tile the data exactly, in offset
    # order, from byte 0 to the end of the file -- no overlap, no gap, nothing after the last one.
    pos = 0
    for info in sorted(out.values(), key=lambda i: (i.begin, i.end)):
        b = info.begin - data_start
        if b != pos:
            what = "overlaps the previous tensor" if b < pos else f"leaves a gap of {b - pos} bytes"
            return bad(
                f"tensor {info.name} starts at data byte {b} but the previous tensor ends at {pos}: its "
                f"data_offsets {what} (safetensors refuses such a header: invalid offsets)"
            )
        pos = info.end - data_start
    if pos != size - data_start:
        return bad(
            f"the tensors end at data byte {pos} but the file has {size - data_start} data bytes "
            f"(safetensors refuses it: incomplete metadata / trailing bytes)"
        )
    return out, problems


def _index_files(d: Path, index: Path) -> tuple[list[Path], list[Problem]]:
    """The shard files a model.safetensors.index.json names, each a plain file inside d."""

    try:
        wm = field(read_json_file(index, "safetensors index"), "weight_map", dict, str(index))
        names = sorted(set(wm.values()))
        for n in names:
            if not isinstance(n, str) or not n or Path(n).name != n:
                raise BadInput(f"{index}: 'weight_map'", f"names {n!r}; expected a file name in {d}")
    except BadInput as e:
        return [], [Problem(BAD_FILE, f"unreadable index: {e}")]
    missing = [n for n in names if not (d / n).exists()]
    if missing:
        return [], [Problem(BAD_FILE, f"{index} lists {missing} which are not in {d}")]
    return [d / n for n in names], []


def weight_files(draft_dir: Path) -> tuple[list[Path], list[Problem]]:
    """The safetensors files of a checkpoint dir (index json first), or why there are none usable."""
    d = Path(draft_dir)
    index = d / "model.safetensors.index.json"
    if index.exists():
        return _index_files(d, index)
    files = sorted(d.glob("*.safetensors"))
    if files:
        return files, []
    pickles = sorted(p.name for p in d.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        return [], [
            Problem(
                PICKLE_ONLY,
                f"{d} has only pickle weights ({', '.join(pickles)}): refused — unpickling "
                f"can run code and cannot be checked without loading everything. Convert: "
                f"python -m sglang_eagle3_ext.convert {d} OUT_DIR --allow-pickle",
            )
        ]
    return [], [Problem(NO_WEIGHTS, f"{d} has no *.safetensors weights")]


def scan_headers(draft_dir: Path) -> tuple[dict[str, TensorInfo], list[Problem]]:
    files, problems = weight_files(draft_dir)
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        t, p = read_header(f)
        problems += p
        for k, v in t.items():
            if k in tensors:
                problems.append(Problem(BAD_FILE, f"{k} appears in both {tensors[k].file.name} and {f.name}", key=k))
            tensors[k] = v
    return tensors, problems


def read_array(info: TensorInfo, start: int = 0, count: int | None = None):
    """numpy view of (part of) a tensor; BF16 widened to float32."""
    import numpy as np

    np_dtype = {
        "F64": np.float64,
        "F32": np.float32,
        "F16": np.float16,
        "BF16": np.uint16,
        "I64": np.int64,
        "I32": np.int32,
        "I16": np.int16,
        "I8": np.int8,
        "U8": np.uint8,
        "BOOL": np.bool_,
        "U16": np.uint16,
        "U32": np.uint32,
        "U64": np.uint64,
    }[info.dtype]
    count = info.numel - start if count is None else count
    itemsize = DTYPE_BYTES[info.dtype]
    arr = np.memmap(info.file, dtype=np_dtype, mode="r", offset=info.begin + start * itemsize, shape=(count,))
    if info.dtype == "BF16":
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


def count_non_finite(info: TensorInfo, chunk: int = 1 << 24, progress=None) -> int:
    """Number of NaN/Inf elements, reading the file in chunks (bounded memory); progress.add(bytes) per chunk."""
    import numpy as np

    bad = 0
    for s in range(0, info.numel, chunk):
        n = min(chunk, info.numel - s)
        a = read_array(info, s, n)
        bad += int(a.size - np.count_nonzero(np.isfinite(a)))
        if progress is not None:
            progress.add(n * DTYPE_BYTES[info.dtype])
    return bad


def _flat_chunk(t, start: int, count: int):
    """float64 numpy copy of elements [start, start+count) of a TensorInfo or a tensor."""
    import numpy as np

    if isinstance(t, TensorInfo):
        return np.asarray(read_array(t, start, count), dtype=np.float64)
    return t.detach().reshape(-1)[start : start + count].cpu().double().numpy()


def values_equal(a, b: TensorInfo, chunk: int = 1 << 22) -> bool | None:
    """Exact equality of two float tensors of one shape (a: TensorInfo or tensor), compared in float64 chunk by
    chunk; None when a's dtype cannot be compared here."""
    import numpy as np

    if isinstance(a, TensorInfo) and a.dtype not in FLOAT_DTYPES:
        return None
    if not isinstance(a, TensorInfo) and not a.is_floating_point():
        return None
    if tuple(a.shape) != b.shape:
        return False
    for s in range(0, b.numel, chunk):
        n = min(chunk, b.numel - s)
        if not np.array_equal(_flat_chunk(a, s, n), _flat_chunk(b, s, n)):
            return False
    return True


def file_size_mb(paths) -> float:
    return sum(os.path.getsize(p) for p in paths) / 2**20
