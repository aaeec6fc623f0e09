"""The Llama route's `train --dry-run` step (training/plan.py; what the steps share: training/plan_models.py):
its settings checked as speculators' run checks them, then speculators' Eagle3 draft counted from the target's
config."""

from __future__ import annotations

from ..plan_models import BF16, F32, REF, acts, plan_notes, rate
from ..report import TrainDraftError

# bytes per element at the activation peak: {cuda: {feature: bytes}} (features: see _llama_features)
LLAMA_BYTES = {
    False: dict(TD_S=8.2, TD=18.4, TV=0.2, TT_S2=0.9, TH_SL=51.5, TI_SL=16.4, TH_S=32.9, TKH=0.3),
    True: dict(TD_S=8.0, TD=15.4, TT_S2=0.9, TH_SL=27.3, TI_SL=8.1, TH_S=27.9),
}
LLAMA_MEASURED = (15492, 8192)  # (tokens/s, tokens per packed sequence) on one H200 at Kimi-K2.5's width


def llama_shapes(dcfg: dict, K: int, draft_vocab_size: int) -> dict:
    """Parameter counts of speculators' Eagle3 draft for the layer config `dcfg` (training/speculators/draft_config):
    the target's embedding, its head (twice: the draft's and the verifier's) and final norm frozen; fc, the layers
    and the draft's norm trained."""
    H, V, dv = int(dcfg["hidden_size"]), int(dcfg["vocab_size"]), int(draft_vocab_size)
    heads, kv, hd = int(dcfg["num_attention_heads"]), int(dcfg["num_key_value_heads"]), int(dcfg["head_dim"])
    inter, L = int(dcfg["intermediate_size"]), int(dcfg["num_hidden_layers"])

    def layer(i: int) -> tuple[int, int]:  # (linear weights, all); layer 0 reads cat(embeds, states): 2 x hidden
        width = 2 * H if i == 0 else H
        linear = (heads + 2 * kv) * hd * width + H * heads * hd + 3 * H * inter
        return linear, linear + (3 if i == 0 else 2) * H

    (lin0, all0), (lin1, all1) = layer(0), layer(1) if L > 1 else (0, 0)
    trained = K * H * H + all0 + (L - 1) * all1 + H
    frozen = V * H + 2 * dv * H + H
    return {
        "total": trained + frozen,
        "trainable": trained,
        "frozen": frozen,
        "linear": K * H * H + lin0 + (L - 1) * lin1 + 2 * dv * H,
        "per_step_trained": lin0 + (L - 1) * lin1,
        "largest_layer": max(all0, all1),
        "layers": all0 + (L - 1) * all1,
        "fc": K * H * H,
        # the RoPE frequencies; d2t (int64) and t2d (bool) with a vocabulary of its own
        "buffers": 2 * (hd // 2) * F32 + (dv * 8 + V if dv < V else 0),
    }


def _llama_features(dcfg: dict, K: int, T: int, S: int, dv: int) -> dict:
    H, V, L = int(dcfg["hidden_size"]), int(dcfg["vocab_size"]), int(dcfg["num_hidden_layers"])
    return dict(
        TD_S=T * dv * S,
        TD=T * dv,
        TV=T * V,
        TT_S2=T * T * S * (S + 1) // 2,
        TH_SL=T * H * S * L,
        TI_SL=T * int(dcfg["intermediate_size"]) * S * L,
        TH_S=T * H * S,
        TKH=T * K * H,
    )


def _llama_flops(dcfg: dict, shapes: dict, T: int, S: int, dv: int) -> int:
    """Per token: every TTT step through the trained layers (forward and backward) and the frozen head (forward
    and its input's gradient), fc once, the verifier's logits, attention over half a sequence."""
    H, L = int(dcfg["hidden_size"]), int(dcfg["num_hidden_layers"])
    attn = 6 * L * 2 * int(dcfg["num_attention_heads"]) * int(dcfg["head_dim"]) * (T // 2 + S)
    return S * (6 * shapes["per_step_trained"] + 4 * dv * H + attn) + 6 * shapes["fc"] + 2 * dv * H


def llama_settings(a, tcfg: dict) -> tuple[dict, int]:
    """(the draft's layer config, its vocabulary) after the checks the route applies before training."""
    from ..data import parse_layer_ids
    from .train import check_settings, layer_config_of  # the route's own

    dv = check_settings(a, tcfg, parse_layer_ids(a.layer_ids), "--layer-ids or --data's metadata")
    dcfg = layer_config_of(tcfg, a)
    return dcfg, dv


def step(a, tcfg: dict, K: int, T: int, device: str, world: int, lengths=None) -> dict:
    """The Llama route (speculators' model; FSDP over the ranks when there are several)."""
    dcfg, dv = llama_settings(a, tcfg)
    if lengths is not None and len(lengths) < 2:
        raise TrainDraftError("need at least 2 samples (speculators holds out a validation split)")
    p = llama_shapes(dcfg, K, dv)
    cuda = device.startswith("cuda")
    tr, total = p["trainable"], p["total"]
    if world > 1:  # FSDP: every weight sharded; the root module (embeddings, heads, fc) and a layer gathered
        gathered = (total - p["layers"] + p["largest_layer"]) * (BF16 if cuda else F32)
        weights = total * F32 // world + gathered + p["buffers"]
    else:
        weights = total * F32 + p["buffers"] + (p["linear"] * BF16 if cuda else 0)
    flops = _llama_flops(dcfg, p, T, a.ttt_steps, dv)
    return {
        "params": {k: p[k] for k in ("total", "trainable", "frozen")},
        "notes": plan_notes(a, T, cuda, compiled=True),
        "bytes": {
            "weights": weights,
            "gradients": tr * F32 // world,
            "optimizer": tr * F32 * 2 // world,
            "activations": acts(LLAMA_BYTES[cuda], _llama_features(dcfg, K, T, a.ttt_steps, dv)),
        },
        "flops_per_token": flops,
        "tflops": rate(LLAMA_MEASURED, llama_ref_flops, cuda),
    }


def llama_ref_flops(T: int) -> float:
    from .draft_config import draft_layer_config

    V = REF["vocab_size"]
    dcfg = draft_layer_config(REF)
    return _llama_flops(dcfg, llama_shapes(dcfg, 3, V), T, 3, V)
