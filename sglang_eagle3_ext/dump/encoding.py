"""Compact hidden-state storage: FP8 e4m3 with one scale per token per H-wide slice ("rowwise").

Selected at dump time with SGLANG_EAGLE3_EXT_DUMP_ENCODING=fp8 (default bf16 = the native format:
tensors stored as captured). Encoding runs on the writer's io threads, after the NaN/Inf check, never
on the forward thread.

Stored per encoded tensor `name` [L, G*H] (G = number of aux layers, or 1 for a final state):
    name            [L, G*H] float8_e4m3fn   q = round(x / scale)   (|q| <= 448)
    name + ".scale" [L, G]   float32         scale = amax(|x|) / 448 over each H-wide slice of each token
    decode:         x ~= q.float() * scale   (then cast to the dtype recorded in the metadata)
A slice of zeros gets scale 0 and decodes to exact zeros; an exact zero element stays zero.
input_ids are never encoded. Per token and H=7168: 4 slices cost 4*7168 + 16 bytes instead of 4*7168*2.

Only torch here; readers decode through fmt.read_sample (raw=True returns what is on disk).
"""

from __future__ import annotations

NATIVE = "native"  # SGLANG_EAGLE3_EXT_DUMP_ENCODING=bf16: tensors as captured
FP8_ROWWISE = "fp8_e4m3_rowwise"
BY_ENV = {"bf16": NATIVE, "fp8": FP8_ROWWISE}  # env value -> name recorded in the metadata
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
SCALE_SUFFIX = ".scale"
SCALE_DTYPE = "float32"
ENCODED = ("aux_hidden_states", "final_prenorm", "final_postnorm")  # = fmt.T_AUX, T_PRE, T_POST
DECODED_DTYPES = ("bfloat16", "float16", "float32")  # what encoded tensors decode to (the captured dtype)
CHUNK_ROWS = 256  # bounds the float32 temporaries (and keeps them cache-friendly)


class EncodingError(ValueError):
    pass


def describe(encoding: str) -> dict:
    """What dump_meta.json records about the encoding of every sample in the directory."""
    if encoding == NATIVE:
        return {"encoding": NATIVE}
    return {
        "encoding": FP8_ROWWISE,
        "encoding_detail": {
            "data_dtype": "float8_e4m3fn",
            "scale_dtype": SCALE_DTYPE,
            "scale": "amax(|x|)/448 per token per hidden_size-wide slice (per layer)",
            "scale_tensor": "<name>" + SCALE_SUFFIX,
            "tensors": list(ENCODED),
            "decode": "x = q.float() * scale[..., None] -> original dtype",
        },
    }


def quantize_rows(x, groups: int = 1):
    """x [L, groups*W] (finite) -> (q [L, groups*W] float8_e4m3fn, scale [L, groups] float32)."""
    import torch

    if x.dim() != 2 or x.shape[1] % groups:
        raise EncodingError(f"expected [L, {groups}*H], got {list(x.shape)}")
    L, N = x.shape
    W = N // groups
    q = torch.empty((L, N), dtype=torch.float8_e4m3fn)
    scale = torch.empty((L, groups), dtype=torch.float32)
    buf = torch.empty((min(L, CHUNK_ROWS), groups, W), dtype=torch.float32)
    for a in range(0, L, CHUNK_ROWS):
        b = min(L, a + CHUNK_ROWS)
        xc = x[a:b].reshape(b - a, groups, W)
        amax = torch.maximum(xc.amax(-1), xc.amin(-1).neg()).float()  # exact in x's dtype; NaN/Inf propagate
        if not bool(torch.isfinite(amax).all()):
            raise EncodingError("NaN/Inf in a tensor to encode (the writer skips and counts such samples first)")
        s = amax / FP8_MAX
        safe = torch.where(s > 0, s, torch.ones_like(s))  # zero slices: q = 0, scale = 0
        y = torch.div(xc, safe.unsqueeze(-1), out=buf[: b - a]).clamp_(-FP8_MAX, FP8_MAX)
        q[a:b].view(b - a, groups, W).copy_(y)
        scale[a:b] = s
    return q, scale


def dequantize_rows(q, scale, dtype=None):
    """Inverse of quantize_rows: [L, G*W] in `dtype` (float32 when None)."""
    import torch

    L, N = q.shape
    G = scale.shape[1]
    W = N // G
    out = torch.empty((L, N), dtype=dtype or torch.float32)
    buf = torch.empty((min(L, CHUNK_ROWS), G, W), dtype=torch.float32)
    for a in range(0, L, CHUNK_ROWS):
        b = min(L, a + CHUNK_ROWS)
        y = buf[: b - a]
        y.copy_(q[a:b].view(b - a, G, W)).mul_(scale[a:b].float().unsqueeze(-1))
        out[a:b].view(b - a, G, W).copy_(y)
    return out


def encode_sample(tensors: dict, groups: dict) -> tuple[dict, dict]:
    """(tensors to store, per-tensor record for the sample metadata). `groups`: name -> slices per row
    (aux: number of layers); encoded tensors absent from `groups` have one slice."""
    out, info = {}, {}
    for k, v in tensors.items():
        if k not in ENCODED:
            out[k] = v
            continue
        g = int(groups.get(k, 1))
        q, s = quantize_rows(v, g)
        out[k], out[k + SCALE_SUFFIX] = q, s
        info[k] = {
            "dtype": str(v.dtype).replace("torch.", ""),
            "scale": k + SCALE_SUFFIX,
            "scale_dtype": SCALE_DTYPE,
            "groups": g,
            "group_width": int(v.shape[1]) // g,
        }
    return out, info


def decode_sample(tensors: dict, meta: dict) -> dict:
    """Stored tensors of one sample -> the tensors as captured (dtype from the metadata). A record or tensor
    that is not what encode_sample writes raises EncodingError saying which."""
    import torch

    enc = meta.get("encoding", NATIVE)
    if enc == NATIVE:
        return tensors
    if enc != FP8_ROWWISE:
        raise EncodingError(f"sample encoding {enc!r} is unknown to this version (known: {NATIVE}, {FP8_ROWWISE})")
    records = meta.get("encoded") or {}
    if not isinstance(records, dict):
        raise EncodingError(f"'encoded' metadata is {type(records).__name__}, not an object")
    out = {k: v for k, v in tensors.items() if not k.endswith(SCALE_SUFFIX)}
    for k, rec in records.items():
        q, scale, dtype = _encoded_parts(tensors, k, rec)
        out[k] = dequantize_rows(q, scale, getattr(torch, dtype))
    return out


def _encoded_parts(tensors: dict, k: str, rec) -> tuple:
    """(q, scale, dtype name) of encoded tensor k, checked against what quantize_rows writes."""
    import torch

    if not isinstance(rec, dict) or not isinstance(rec.get("scale"), str) or rec.get("dtype") not in DECODED_DTYPES:
        raise EncodingError(
            f"the 'encoded' record of {k!r} is not {{'scale': name, 'dtype': one of "
            f"{', '.join(DECODED_DTYPES)}}}: {str(rec)[:80]}"
        )
    if k not in tensors or rec["scale"] not in tensors:
        raise EncodingError(f"encoded tensor {k!r} or its scale {rec['scale']!r} is missing from the file")
    q, scale = tensors[k], tensors[rec["scale"]]
    if (
        q.dtype != torch.float8_e4m3fn
        or scale.dtype != torch.float32
        or q.dim() != 2
        or scale.dim() != 2
        or q.shape[0] != scale.shape[0]
        or scale.shape[1] < 1
        or q.shape[1] % scale.shape[1]
    ):
        raise EncodingError(
            f"encoded tensor {k!r} {str(q.dtype)[6:]} {list(q.shape)} with scale "
            f"{str(scale.dtype)[6:]} {list(scale.shape)}: expected float8_e4m3fn [L, G*W] and "
            f"float32 [L, G]"
        )
    return q, scale, rec["dtype"]
