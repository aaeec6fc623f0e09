"""Header-only reading of .safetensors files: 8-byte little-endian length + JSON header + data.

Fast on multi-GB drafts (reads a few KB per file) and needs neither torch nor SGLang; small
tensors (d2t) and the opt-in value scan read their bytes through a memory map.
"""
from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path

from .errors import BAD_FILE, NO_WEIGHTS, PICKLE_ONLY, Problem

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
_MAX_HEADER = 100 * 1024 * 1024
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    begin: int   # absolute byte offsets in the file
    end: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def read_header(path: Path) -> tuple[dict[str, TensorInfo], list[Problem]]:
    """Tensors described by the header, or a BAD_FILE problem saying what is wrong with the file."""
    path = Path(path)
    size = path.stat().st_size

    def bad(why: str):
        return {}, [Problem(BAD_FILE, f"{path}: {why}; the file is truncated or not safetensors — "
                                      f"re-copy/re-download it or re-save the draft")]

    if size < 8:
        return bad(f"only {size} bytes")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(size - 8, _MAX_HEADER):
            return bad(f"header length field says {n} bytes but the file has {size - 8} after it")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except ValueError as e:
        return bad(f"header is not valid JSON ({e})")
    if not isinstance(header, dict):
        return bad("header is not a JSON object")
    data_start = 8 + n
    out, problems = {}, []
    for name, meta in header.items():
        if name == "__metadata__":
            if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
                return bad("__metadata__ must map strings to strings")
            continue
        try:
            dtype, shape, (b, e) = meta["dtype"], tuple(meta["shape"]), meta["data_offsets"]
            if not all(isinstance(x, int) and x >= 0 for x in (*shape, b, e)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            return bad(f"header entry {name!r} is malformed")
        if dtype not in DTYPE_BYTES:
            return bad(f"tensor {name} has dtype {dtype!r}, which safetensors does not know")
        if b > e:
            return bad(f"tensor {name} has data_offsets [{b}, {e}] (begin after end)")
        info = TensorInfo(name, dtype, shape, path, data_start + b, data_start + e)
        want = info.numel * DTYPE_BYTES[dtype]
        if e - b != want:
            problems.append(Problem(BAD_FILE, f"{path}: tensor {name} {dtype}{list(shape)} needs {want} bytes, "
                                              f"header gives {e - b}", key=name))
        if data_start + e > size:
            return bad(f"tensor {name} ends at byte {data_start + e} but the file has {size} bytes")
        out[name] = info
    # safetensors' own rule (and SGLang's loader through it): the tensors tile the data exactly, in offset
    # order, from byte 0 to the end of the file -- no overlap, no gap, nothing after the last one.
    pos = 0
    for info in sorted(out.values(), key=lambda i: (i.begin, i.end)):
        b = info.begin - data_start
        if b != pos:
            what = "overlaps the previous tensor" if b < pos else f"leaves a gap of {b - pos} bytes"
            return bad(f"tensor {info.name} starts at data byte {b} but the previous tensor ends at {pos}: its "
                       f"data_offsets {what} (safetensors refuses such a header: invalid offsets)")
        pos = info.end - data_start
    if pos != size - data_start:
        return bad(f"the tensors end at data byte {pos} but the file has {size - data_start} data bytes "
                   f"(safetensors refuses it: incomplete metadata / trailing bytes)")
    return out, problems


def weight_files(draft_dir: Path) -> tuple[list[Path], list[Problem]]:
    """The safetensors files of a checkpoint dir (index json first), or why there are none usable."""
    d = Path(draft_dir)
    index = d / "model.safetensors.index.json"
    if index.exists():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError) as e:
            return [], [Problem(BAD_FILE, f"{index}: unreadable index ({e})")]
        missing = [n for n in names if not (d / n).exists()]
        if missing:
            return [], [Problem(BAD_FILE, f"{index} lists {missing} which are not in {d}")]
        return [d / n for n in names], []
    files = sorted(d.glob("*.safetensors"))
    if files:
        return files, []
    pickles = sorted(p.name for p in d.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        return [], [Problem(PICKLE_ONLY, f"{d} has only pickle weights ({', '.join(pickles)}): refused — unpickling "
                                         f"can run code and cannot be checked without loading everything. Convert: "
                                         f"python -m sglang_eagle3_ext.convert {d} OUT_DIR --allow-pickle")]
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

    np_dtype = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
                "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
                "U16": np.uint16, "U32": np.uint32, "U64": np.uint64}[info.dtype]
    count = info.numel - start if count is None else count
    itemsize = DTYPE_BYTES[info.dtype]
    arr = np.memmap(info.file, dtype=np_dtype, mode="r", offset=info.begin + start * itemsize, shape=(count,))
    if info.dtype == "BF16":
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


def count_non_finite(info: TensorInfo, chunk: int = 1 << 24) -> int:
    """Number of NaN/Inf elements, reading the file in chunks (bounded memory)."""
    import numpy as np

    bad = 0
    for s in range(0, info.numel, chunk):
        a = read_array(info, s, min(chunk, info.numel - s))
        bad += int(a.size - np.count_nonzero(np.isfinite(a)))
    return bad


def file_size_mb(paths) -> float:
    return sum(os.path.getsize(p) for p in paths) / 2**20
