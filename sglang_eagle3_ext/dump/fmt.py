"""The native dump file: one safetensors file per sample (no pickle), metadata in its header.

Tensors:  input_ids [L] int64;  aux_hidden_states [L, K*H] (HF indices in metadata, in order);
          final_prenorm [L, H]  (output of the last decoder layer, before model.norm = speculators' last slot)
          final_postnorm [L, H] (after model.norm = HF hidden_states[n] = SpecForge `hidden_state`)
Which finals are present follows SGLANG_EAGLE3_EXT_DUMP_FINAL; with only the pre-norm one stored,
the post-norm one is derived with final_norm.safetensors (the model's norm weight and eps).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .manifest import fsync_dir

FORMAT_VERSION = 1
META_KEY = "sge3_dump"
T_IDS, T_AUX, T_PRE, T_POST = "input_ids", "aux_hidden_states", "final_prenorm", "final_postnorm"


def atomic_write(path: str | os.PathLike, write_fn, tmp_tag: str = "") -> int:
    """write_fn(tmp_path) then fsync, rename into place, fsync the directory; returns bytes.
    On any failure the temporary file is removed and nothing appears at `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{tmp_tag}.{os.getpid()}")
    try:
        write_fn(str(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return size
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_sample(path, tensors: dict, meta: dict, tmp_tag: str = "") -> int:
    from safetensors.torch import save_file

    contiguous = {k: v.contiguous() for k, v in tensors.items()}
    header = {META_KEY: json.dumps(meta, sort_keys=True)}
    return atomic_write(path, lambda p: save_file(contiguous, p, metadata=header), tmp_tag)


def read_sample(path, raw: bool = False) -> tuple[dict, dict]:
    """(tensors, metadata) of one native sample file. Compact encodings (metadata "encoding", see
    encoding.py) are decoded to the captured dtype; raw=True returns the tensors as stored (fp8 + scales)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get(META_KEY, "{}"))
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if not raw and meta.get("encoding") not in (None, "native"):
        from .encoding import decode_sample

        tensors = decode_sample(tensors, meta)
    return tensors, meta


def write_json_atomic(path, obj) -> None:
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()

    def w(p):
        with open(p, "wb") as fh:
            fh.write(data)
    atomic_write(path, w)


def rms_norm(x, weight, eps: float):
    """The model's final RMSNorm in fp32 (as SGLang's kernels compute it), cast back to x's dtype."""
    import torch

    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)
