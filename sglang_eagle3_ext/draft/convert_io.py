"""`convert`'s files: reading a source draft's weights (safetensors, or .bin/.pt through torch.load
weights_only=True), the rule for its destination (outdir.py: only a previous output of convert is replaced,
never a directory holding the source), and writing the converted draft beside DST, renamed into place."""

from __future__ import annotations

import json
from pathlib import Path

from .. import outdir
from ..boundary import BadInput, regular_file
from . import errors as E
from .errors import ConversionRefused
from .safetensors_io import DTYPE_BYTES, PICKLE_SUFFIXES, scan_headers, weight_files

_OUR_FILES = ("config.json", "model.safetensors.index.json")
_METADATA = {"format": "pt", "converted_by": "sglang_eagle3_ext"}


def _safe_dtypes() -> set:
    import torch

    names = {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U8": "uint8",
        "BOOL": "bool",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
        "U16": "uint16",
        "U32": "uint32",
        "U64": "uint64",
    }
    return {getattr(torch, names[k]) for k in DTYPE_BYTES if hasattr(torch, names[k])}


def read_pickle(f: Path) -> dict:
    """A .bin/.pt state dict through torch.load(weights_only=True) (no code runs), checked to be a flat mapping
    name -> dense tensor that safetensors can store. Anything else is bad input naming the file."""
    import torch

    regular_file(f, "pickle checkpoint")
    try:
        sd = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the unpickler makes of outside bytes is bad input, not a bug
        raise BadInput(str(f), f"not a readable torch checkpoint ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(sd, dict):
        raise BadInput(str(f), f"holds a {type(sd).__name__}; expected a state dict (mapping name -> tensor)")
    safe, out, storages = _safe_dtypes(), {}, set()
    for k, v in sd.items():
        if not isinstance(k, str):
            raise BadInput(str(f), f"key {k!r} is not a string; expected a state dict (mapping name -> tensor)")
        if not isinstance(v, torch.Tensor):
            raise BadInput(
                f"{f}: {k!r}",
                f"holds a {type(v).__name__}, not a tensor (a training checkpoint? save the model's state_dict())",
            )
        if v.layout != torch.strided or v.dtype not in safe:
            raise BadInput(
                f"{f}: {k!r}",
                f"is a {v.dtype} {v.layout} tensor; safetensors stores dense tensors of "
                f"{', '.join(sorted(str(d).replace('torch.', '') for d in safe))}",
            )
        v = v.detach()
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if v.numel() and ptr in storages else v  # tied weights: safetensors refuses shared storage
        storages.add(ptr)
    return out


def iter_source(src: Path, allow_pickle: bool):
    """(file name to write it to, checkpoint key, tensor) for every tensor of the source draft."""
    from safetensors import safe_open

    files, problems = weight_files(src)
    if problems and problems[0].code == E.PICKLE_ONLY and allow_pickle:
        for f in sorted(p for p in src.iterdir() if p.suffix in PICKLE_SUFFIXES):
            for k, v in read_pickle(f).items():
                yield f.name.rsplit(".", 1)[0] + ".safetensors", k, v
        return
    _, hp = scan_headers(src)
    if problems or hp:
        raise ConversionRefused(problems + hp, f"convert: cannot read {src}:")
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                yield f.name, k, h.get_tensor(k)


def destination_rule(src: Path, dst: Path, force: bool) -> dict:
    """Never write into, around or through the source, nor over anything that is not a previous output of
    convert (--force replaces only that): outdir.py's rule, checked before anything is read (OutputDirRefused,
    a BadInput naming DST and the fix). Returns the rule for outdir.writing."""

    def legacy(d: Path) -> bool:  # outputs written before outdir.MARKER: our file names, our weights
        entries = list(d.iterdir())
        foreign = [e for e in entries if not (e.is_file() and (e.name in _OUR_FILES or e.suffix == ".safetensors"))]
        return (
            not foreign
            and (d / "config.json").is_file()
            and all(_converted_by_us(e) for e in entries if e.suffix == ".safetensors")
        )

    rule = dict(tool="convert", flag="DST", inputs=[("source draft", src)], replace=force, legacy=legacy)
    outdir.check(dst, **rule)
    return rule


def _converted_by_us(path: Path) -> bool:
    import struct

    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            meta = json.loads(f.read(min(n, 1 << 26))).get("__metadata__") or {}
    except (OSError, ValueError, struct.error, AttributeError):
        return False
    return meta.get("converted_by") == _METADATA["converted_by"]


def write_draft(src: Path, dst: Path, force: bool, shards: dict[str, dict], cfg: dict) -> None:
    """The converted draft, built beside DST and renamed into place (one shard: model.safetensors)."""
    from safetensors.torch import save_file

    with outdir.writing(dst, **destination_rule(src, dst, force), record={"source": str(src)}) as tmp:
        names = {f: ("model.safetensors" if len(shards) == 1 else f) for f in shards}
        for f, tensors in shards.items():
            save_file(tensors, str(tmp / names[f]), metadata=dict(_METADATA))
        if len(shards) > 1:
            wm = {k: names[f] for f, ts in shards.items() for k in ts}
            (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}, indent=2))
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
