"""The native dump file: one safetensors file per sample (no pickle), metadata in its header.

Tensors:  input_ids [L] int64;  aux_hidden_states [L, K*H] (HF indices in metadata, in order);
          final_prenorm [L, H]  (output of the last decoder layer, before model.norm = speculators' last slot)
          final_postnorm [L, H] (after model.norm = HF hidden_states[n] = SpecForge `hidden_state`)
Which finals are present follows SGLANG_EAGLE3_EXT_DUMP_FINAL; with only the pre-norm one stored,
the post-norm one is derived with final_norm.safetensors (the model's norm weight and eps).
Dump while serving EAGLE-3 (serving_assembler.py) writes prompt+response samples whose metadata and
manifest line add: prompt_len, prefill_tokens (states [0, prefill_tokens) from EXTEND batches),
verify_tokens (the rest, from TARGET_VERIFY batches), accept_len, source="serving".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .manifest import fsync_dir

FORMAT_VERSION = 1
META_KEY = "sge3_dump"
T_IDS, T_AUX, T_PRE, T_POST = "input_ids", "aux_hidden_states", "final_prenorm", "final_postnorm"


_dirs_made: set[str] = set()


def _ensure_dir(d: Path) -> None:
    """mkdir -p once per directory and process: the dump writes into 256 shard dirs, and each syscall
    of its io threads is a GIL hand-off with the scheduler's forward thread."""
    key = str(d)
    if key not in _dirs_made:
        d.mkdir(parents=True, exist_ok=True)
        _dirs_made.add(key)


def dir_known(d: Path) -> bool:
    """Made (or found) by this process before: writing there makes no directory."""
    return str(d) in _dirs_made


def atomic_write(
    path: str | os.PathLike, write_fn, tmp_tag: str = "", sync_dir: bool = True, cache_dir: bool = False
) -> int:
    """write_fn(tmp_path) then fsync, rename into place, fsync the directory; returns bytes.
    On any failure the temporary file is removed and nothing appears at `path`. A write_fn that
    fsyncs the file itself returns its size (saves reopening it); sync_dir=False leaves the
    directory fsync to the caller (the dump writer batches it with its manifest commit); cache_dir=True
    makes the directory once per process (the dump's shard dirs), else on every call."""
    path = Path(path)
    if cache_dir:
        _ensure_dir(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{tmp_tag}.{os.getpid()}")
    try:
        size = write_fn(str(tmp))
        if size is None:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        if isinstance(e, FileNotFoundError):  # its directory was removed: make it again next time
            _dirs_made.discard(str(path.parent))
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync_dir:
        fsync_dir(path.parent)
    return size


# safetensors dtype names (https://github.com/huggingface/safetensors, format spec)
_ST_DTYPES = {
    "bfloat16": "BF16",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
_WRITE_MAX = 1 << 30  # per os.write call (Linux caps one write at ~2 GiB)


def save_safetensors(path, tensors: dict, metadata: dict[str, str] | None = None, fsync: bool = False) -> int:
    """A standard safetensors file written straight from the tensors' memory; returns its size.

    Why not safetensors.torch.save_file: it first copies every tensor into a Python bytes object and
    serialises while holding the GIL, which the dump writer's io threads would take from SGLang's
    scheduler thread in the same process for milliseconds per sample. Here one os.writev releases the
    GIL for the whole copy into the page cache, nothing is copied in Python, and the file is opened
    once (every call that releases the GIL costs a wait to get it back from a busy scheduler).
    """
    import ctypes
    import json as _json

    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    bufs, alive, off = [], [], 0  # alive: contiguous copies made here, kept until written
    for name, t in tensors.items():
        if not t.is_contiguous():
            t = t.contiguous()
        n = t.nbytes
        header[name] = {
            "dtype": _ST_DTYPES[str(t.dtype).replace("torch.", "")],
            "shape": list(t.shape),
            "data_offsets": [off, off + n],
        }
        if n:  # the tensor's own bytes, no torch op per view (each would hand the GIL back and forth)
            alive.append(t)
            bufs.append(memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B"))
        off += n
    h = _json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
    bufs = [memoryview(len(h).to_bytes(8, "little")), memoryview(h), *bufs]
    total = sum(b.nbytes for b in bufs)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = os.writev(fd, bufs) if total <= _WRITE_MAX else 0
        if done < total:  # huge file or a short write: finish buffer by buffer
            for b in bufs:
                if done >= b.nbytes:
                    done -= b.nbytes
                    continue
                mv, done = b[done:], 0
                while mv:
                    mv = mv[os.write(fd, mv[:_WRITE_MAX]) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return total


def write_sample(path, tensors: dict, meta: dict, tmp_tag: str = "", sync_dir: bool = True) -> int:
    header = {META_KEY: json.dumps(meta, sort_keys=True)}
    return atomic_write(
        path, lambda p: save_safetensors(p, tensors, header, fsync=True), tmp_tag, sync_dir, cache_dir=True
    )


class SampleFileError(ValueError):
    """A sample file whose header is not what this module writes."""


def read_sample(path, raw: bool = False) -> tuple[dict, dict]:
    """(tensors, metadata) of one native sample file. Compact encodings (metadata "encoding", see
    encoding.py) are decoded to the captured dtype; raw=True returns the tensors as stored (fp8 + scales)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        try:
            meta = json.loads((f.metadata() or {}).get(META_KEY, "{}"))
        except ValueError as e:
            raise SampleFileError(f"{path}: its {META_KEY} metadata is not JSON ({e})") from None
        if not isinstance(meta, dict):
            raise SampleFileError(f"{path}: its {META_KEY} metadata is {type(meta).__name__}, not an object")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if not raw and meta.get("encoding") not in (None, "native"):
        from .encoding import decode_sample

        tensors = decode_sample(tensors, meta)
    return tensors, meta


# SGLang replaces the positions of images/videos in input_ids by MM_PAD_SHIFT_VALUE + a hash
# (managers/schedule_batch.py): such ids are no tokens of any vocabulary.
MM_PAD_SHIFT_VALUE = 1_000_000


def token_id_problem(ids, vocab: int | None) -> str | None:
    """Why an integer ids tensor holds something that is not a token of a `vocab`-sized vocabulary (None: fine;
    vocab None: only what is never a token is refused)."""
    if ids.numel() == 0:
        return None
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        return f"token id {lo} is negative"
    if hi >= MM_PAD_SHIFT_VALUE:
        n = int((ids >= MM_PAD_SHIFT_VALUE).sum())
        return (
            f"{n} token ids >= {MM_PAD_SHIFT_VALUE} (e.g. {hi}): multimodal pad values SGLang puts where an "
            f"image or video was, not tokens; a request with images is no text training sample"
        )
    if vocab is not None and hi >= vocab:
        return f"token id {hi} is outside the target's vocab [0, {vocab})"
    return None


FLOAT_DTYPES = ("bfloat16", "float16", "float32")
FINALS = {"prenorm": (T_PRE,), "postnorm": (T_POST,), "both": (T_PRE, T_POST)}


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


def sample_problem(
    t: dict, *, n_aux: int, hidden: int, final: str, dtype: str | None = None, vocab: int | None = None
) -> str | None:
    """Why the tensors of one sample are not what dump_meta.json says every sample holds (None: they are):
    input_ids [L] integer ids of the vocab, aux_hidden_states [L, n_aux*hidden], the finals `final` names
    [L, hidden], all of one float dtype (`dtype` when it names one), all finite."""
    import torch

    missing = [k for k in (T_IDS, T_AUX, *FINALS[final]) if k not in t]
    if missing:
        return f"no {' and no '.join(missing)} tensor (dump_meta.json: final={final!r}; the file has {sorted(t)})"
    ids = t[T_IDS]
    if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        return f"{T_IDS} must be a 1-D integer tensor, got {_dtype(ids)} {list(ids.shape)}"
    L = int(ids.shape[0])
    if L == 0:
        return "holds no tokens"
    problem = token_id_problem(ids, vocab)
    if problem:
        return problem
    want = {T_AUX: [L, n_aux * hidden], T_PRE: [L, hidden], T_POST: [L, hidden]}
    states = [k for k in (T_AUX, T_PRE, T_POST) if k in t]
    for k in states:
        if list(t[k].shape) != want[k]:
            return (
                f"{k} is {list(t[k].shape)}, expected {want[k]}: {L} rows (one per token id), "
                f"{'{} aux layers x '.format(n_aux) if k == T_AUX else ''}hidden size {hidden} (dump_meta.json)"
            )
    dts = {_dtype(t[k]) for k in states}
    expect = dtype if dtype in FLOAT_DTYPES else None
    if len(dts) > 1 or not dts <= set(FLOAT_DTYPES) or (expect and dts != {expect}):
        return (
            f"states are {', '.join(sorted(dts))}, expected {expect or 'one of ' + ', '.join(FLOAT_DTYPES)}"
            f"{' (dump_meta.json dtype)' if expect else ''}"
        )
    for k in states:
        bad = ~torch.isfinite(t[k])
        if bool(bad.any()):
            return f"{k} holds {int(bad.sum())} NaN/Inf values"
    return None


def write_json_atomic(path, obj) -> None:
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()

    def w(p):
        with open(p, "wb") as fh:
            fh.write(data)

    atomic_write(path, w)
