"""The DFlash route's `train --dry-run` step (training/plan.py; what the steps share: training/plan_models.py):
its settings checked as the run checks them, then speculators' DFlash draft counted from the target's config."""

from __future__ import annotations

from ..plan_models import BF16, F32, acts, plan_notes, rate
from ..report import TrainDraftError
from ..speculators.plan import LLAMA_MEASURED, llama_ref_flops

# bytes per element at the peak (CPU float32 / CUDA bf16 autocast), estimated from the tensors one step keeps for
# its backward (not fitted to a measured step): the block logits, the teacher's and the loss's softmaxes (QV); per
# layer the block tokens' states (QH_L) and MLP (QI_L), the context's keys and values (TH_L); the aux states and fc
# (TKH); on a CPU SDPA's dense mask and scores (QC_L), which flex attention on CUDA never materialises
DFLASH_BYTES = {
    False: dict(QV=24.0, QH_L=48.0, QI_L=16.0, TH_L=16.0, TKH=8.0, QC_L=9.0),
    True: dict(QV=16.0, QH_L=24.0, QI_L=8.0, TH_L=8.0, TKH=4.0),
}


def dflash_shapes(dcfg: dict, K: int) -> dict:
    """Parameter counts of speculators' DFlash draft for the Qwen3 layer config `dcfg` (training/dflash/config.py):
    the target's embedding and head (twice: the draft's and the verifier's) and final norm frozen; fc, its norm,
    the layers and the final norm trained."""
    H, V, L = int(dcfg["hidden_size"]), int(dcfg["vocab_size"]), int(dcfg["num_hidden_layers"])
    heads, kv, hd = int(dcfg["num_attention_heads"]), int(dcfg["num_key_value_heads"]), int(dcfg["head_dim"])
    linear = (2 * heads + 2 * kv) * hd * H + 3 * H * int(dcfg["intermediate_size"])
    trained = L * (linear + 2 * hd + 2 * H) + K * H * H + 2 * H
    frozen = 3 * V * H + H
    return {
        "total": trained + frozen,
        "trainable": trained,
        "frozen": frozen,
        "per_layer_linear": linear,
        "kv": 2 * kv * hd * H,
        "layers": L * (linear + 2 * hd + 2 * H),
        "largest_layer": linear + 2 * hd + 2 * H,
        "buffers": 2 * (hd // 2) * F32,
    }


def _dflash_work(dcfg: dict, K: int, T: int, Q: int, B: int) -> tuple[dict, int]:
    """(tensor families, floating-point work) of one micro-batch: T context tokens, Q = anchors x block tokens."""
    H, V, L = int(dcfg["hidden_size"]), int(dcfg["vocab_size"]), int(dcfg["num_hidden_layers"])
    p = dflash_shapes(dcfg, K)
    feats = dict(
        QV=Q * V,
        QH_L=Q * H * L,
        QI_L=Q * int(dcfg["intermediate_size"]) * L,
        TH_L=T * H * L,
        TKH=T * K * H,
        QC_L=Q * (T + Q) * L * int(dcfg["num_attention_heads"]),
    )
    attn = 6 * L * 2 * int(dcfg["num_attention_heads"]) * int(dcfg["head_dim"]) * Q * (T // 2 + B)
    flops = 6 * p["per_layer_linear"] * L * Q + 6 * p["kv"] * L * T + 6 * K * H * H * T + 6 * V * H * Q + attn
    return feats, flops


def step(a, tcfg: dict, K: int, T: int, device: str, world: int, lengths=None) -> dict:
    """The DFlash route (speculators' model and trainer; FSDP over the ranks when there are several)."""
    from .train import C  # the route's own checks and layer config (its modules import nothing heavy)

    C.check_settings(a, tcfg)
    C.needs_tokenizer(a, a.target)
    K = len(C.layer_ids_for(a, int(tcfg["num_hidden_layers"]), None)[0])
    if lengths is not None and len(lengths) < 2:
        raise TrainDraftError("need at least 2 samples (speculators holds out a validation split)")
    dcfg, B = C.draft_layer_config(tcfg, a), C.block_size(a)
    p = dflash_shapes(dcfg, K)
    cuda = device.startswith("cuda")
    Q = min(C.max_anchors(a), T) * B
    feats, flops = _dflash_work(dcfg, K, T, Q, B)
    tr, total = p["trainable"], p["total"]
    if world > 1:
        gathered = (total - p["layers"] + p["largest_layer"]) * (BF16 if cuda else F32)
        weights = total * F32 // world + gathered + p["buffers"]
    else:
        weights = total * F32 + p["buffers"] + ((tr + p["frozen"]) * BF16 if cuda else 0)
    notes = [
        f"activations: one micro-batch of {T} tokens and up to {Q} block tokens ({C.max_anchors(a)} anchors x "
        f"block {B}), estimated from its tensors (not fitted to a measured step)",
        *(["time: the DFlash route's rate is not measured; the Llama route's effective TFLOP/s is assumed"] * cuda),
        *plan_notes(a, T, cuda)[1:],
    ]
    return {
        "params": {k: p[k] for k in ("total", "trainable", "frozen")},
        "notes": notes,
        "bytes": {
            "weights": weights,
            "gradients": tr * F32 // world,
            "optimizer": tr * F32 * 2 // world,
            "activations": acts(DFLASH_BYTES[cuda], feats),
        },
        "flops_per_token": flops // T,
        "tflops": rate(LLAMA_MEASURED, llama_ref_flops, cuda),
    }
