"""The drafts as `train --dry-run` sizes them (training/plan.py), in arithmetic from the target's config alone:
nothing is built or run, so any size answers at once. Each route first applies the settings checks its training
run applies (the same functions), then counts:

- the draft's parameters from its shapes (tests/unit/test_train_plan.py holds them to the drafts the routes
  build);
- the activation peak of one micro-batch's forward, loss and backward, as bytes per element of each family of
  tensors the step keeps alive (the logits and their log-softmaxes per TTT step, the attention masks growing with
  the steps, the layers' inputs and outputs), for float32 on a CPU and bf16 autocast on CUDA. The figures are a
  least-squares fit to the step run on torch's meta device with every storage followed from creation to release,
  over random shapes (within 13 % of it from 64 tokens up); tests/unit/test_train_plan.py holds the plan within
  15 % of a measured run's peak, so a change to a step that moves its peak shows there. On CUDA the Llama route
  compiles its forward and fuses its loss, which keep less: an upper bound there (measured at Kimi-K2.5's width,
  8192 tokens, one H200: 60 GiB peak for 94 GiB planned; the MLA route: 50 GiB for 56 GiB planned);
- the floating-point work per token (6 per trained weight and token, 4 through a frozen head, 2 for the
  teacher's logits, plus attention), and from it the time per step at each route's rate measured on one H200 at
  Kimi-K2.5's width (docs/results.md, Training throughput).
"""

from __future__ import annotations

from .report import TrainDraftError

F32, BF16 = 4, 2
CPU_TFLOPS = 0.05  # a CPU's order of magnitude: its time is a rough guide only

# bytes per element at the activation peak: {cuda: {feature: bytes}} (features: see _mla_features/_llama_features)
MLA_BYTES = {
    False: dict(
        TV_S=11.5, TV=14.0, TT_S2=5.4, TT_S=5.3, TH_S=44.3, TI_S=15.9, Tq_S=13.0, Tv_S=18.6, Tlat_S=6.5, TKH=4.9, VH=1.3
    ),
    True: dict(
        TV_S=9.7, TV=17.3, TT_S2=2.1, TT_S=4.5, TH_S=38.2, TI_S=8.2, Tq_S=5.3, Tv_S=9.7, Tlat_S=8.7, TKH=0.3, VH=1.0
    ),
}
LLAMA_BYTES = {
    False: dict(TD_S=8.2, TD=18.4, TV=0.2, TT_S2=0.9, TH_SL=51.5, TI_SL=16.4, TH_S=32.9, TKH=0.3),
    True: dict(TD_S=8.0, TD=15.4, TT_S2=0.9, TH_SL=27.3, TI_SL=8.1, TH_S=27.9),
}
# one H200 at Kimi-K2.5's width (hidden 7168, vocab 163,840, 3 TTT steps): tokens/s measured per route
# (docs/results.md: the MLA route on 2048-token samples, the Llama route on 8192-token packed sequences)
KIMI = dict(hidden_size=7168, vocab_size=163840, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512)
KIMI.update(qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, intermediate_size=18432)
MLA_MEASURED, LLAMA_MEASURED = (8827, 2048), (15492, 8192)  # (tokens/s, tokens per sample)


def _acts(table: dict, features: dict) -> int:
    return int(sum(table.get(k, 0.0) * v for k, v in features.items()))


# ---- the MLA route ---------------------------------------------------------------------------------------------
def mla_shapes(cfg: dict, K: int) -> dict:
    """Parameter counts of the MLA draft `cfg` describes (draft/arch/mla/net.Eagle3MLADraft): total, trainable (all
    but the embedding), the linear layers' weights per TTT step, and its buffers in bytes (the RoPE tables)."""
    H, V = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    Ht, dv = int(cfg.get("target_hidden_size") or H), int(cfg.get("draft_vocab_size") or V)
    n, qr, kvr = int(cfg["num_attention_heads"]), int(cfg["q_lora_rank"]), int(cfg["kv_lora_rank"])
    rope, nope, vd, inter = (
        int(cfg[k]) for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "intermediate_size")
    )
    attn = 2 * H * qr + qr * n * (nope + rope) + 2 * H * (kvr + rope) + kvr * n * (nope + vd) + n * vd * H
    mlp, head = 3 * H * inter, dv * H
    fc = K * Ht * H + (H if cfg.get("bias") else 0)
    norms = qr + kvr + 4 * H + (K * Ht if cfg.get("fc_norm") or cfg.get("use_aux_norm") else 0)
    total = V * H + fc + attn + mlp + norms + head
    return {
        "total": total,
        "trainable": total - V * H,
        "frozen": V * H,
        "per_step_linear": attn + mlp + head,
        "fc": K * Ht * H,
        "buffers": 2 * int(cfg["max_position_embeddings"]) * (rope // 2) * F32,
    }


def _mla_features(cfg: dict, K: int, T: int, S: int) -> dict:
    H, V, inter = int(cfg["hidden_size"]), int(cfg["vocab_size"]), int(cfg["intermediate_size"])
    n, rope = int(cfg["num_attention_heads"]), int(cfg["qk_rope_head_dim"])
    qk, vd = int(cfg["qk_nope_head_dim"]) + rope, int(cfg["v_head_dim"])
    lat = int(cfg["q_lora_rank"]) + int(cfg["kv_lora_rank"]) + rope
    return dict(
        TV_S=T * V * S,
        TV=T * V,
        TT_S2=T * T * S * (S + 1) // 2,
        TT_S=T * T * S,
        TH_S=T * H * S,
        TI_S=T * inter * S,
        Tq_S=T * n * qk * S,
        Tv_S=T * n * vd * S,
        Tlat_S=T * lat * S,
        TKH=T * K * H,
        TH=T * H,
        VH=V * H,
    )


def _mla_flops(cfg: dict, shapes: dict, T: int, S: int) -> int:
    """Per token: every TTT step through the trained layers and head (forward and backward), fc once, the
    teacher's logits, and attention over half the sample on average."""
    n, qk, vd = (
        int(cfg["num_attention_heads"]),
        int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"]),
        int(cfg["v_head_dim"]),
    )
    attn = 6 * n * (qk + vd) * (T // 2 + S)
    return (
        S * (6 * shapes["per_step_linear"] + attn)
        + 6 * shapes["fc"]
        + 2 * int(cfg["vocab_size"]) * int(cfg["hidden_size"])
    )


def _mla_config(tcfg: dict, K: int, intermediate_size):
    from .mla.train import mla_draft_config  # the route's own (it imports torch for the RoPE rule; builds nothing)

    return mla_draft_config(tcfg, list(range(1, K + 1)), intermediate_size)


def mla_step(a, tcfg: dict, K: int, T: int, device: str, world: int = 1, lengths=None) -> dict:
    """The MLA route (one process per rank, the draft replicated: DDP)."""
    from ..draft.arch import mla
    from .mla.config import check_lengths, check_settings, layer_ids_for

    layer_ids_for(a, int(tcfg["num_hidden_layers"]), None)
    check_settings(a, tcfg)
    if lengths:
        check_lengths(lengths, mla.heldout(len(lengths), a.train_ratio)[0], a.ttt_steps)
    cfg = _mla_config(tcfg, K, a.intermediate_size)
    p = mla_shapes(cfg, K)
    cuda = device.startswith("cuda")
    H, V, tr = int(tcfg["hidden_size"]), int(tcfg["vocab_size"]), p["trainable"]
    weights = p["total"] * F32 + p["buffers"] + (V * H + H) * BF16 + (tr * BF16 if cuda else 0)
    flops = _mla_flops(cfg, p, T, a.ttt_steps)
    return {
        "params": {k: p[k] for k in ("total", "trainable", "frozen")},
        "notes": _notes(a, T, cuda),
        "bytes": {
            "weights": weights,
            "gradients": tr * F32,
            "optimizer": tr * F32 * 2,
            "activations": _acts(MLA_BYTES[cuda], _mla_features(cfg, K, T, a.ttt_steps)),
        },
        "flops_per_token": flops,
        "tflops": _rate(MLA_MEASURED, _mla_ref_flops, cuda),
    }


# ---- the Llama route -------------------------------------------------------------------------------------------
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
    from .data import parse_layer_ids
    from .speculators.train import check_settings, layer_config_of  # the route's own

    dv = check_settings(a, tcfg, parse_layer_ids(a.layer_ids), "--layer-ids or --data's metadata")
    dcfg = layer_config_of(tcfg, a)
    return dcfg, dv


def llama_step(a, tcfg: dict, K: int, T: int, device: str, world: int, lengths=None) -> dict:
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
        "notes": _notes(a, T, cuda, compiled=True),
        "bytes": {
            "weights": weights,
            "gradients": tr * F32 // world,
            "optimizer": tr * F32 * 2 // world,
            "activations": _acts(LLAMA_BYTES[cuda], _llama_features(dcfg, K, T, a.ttt_steps, dv)),
        },
        "flops_per_token": flops,
        "tflops": _rate(LLAMA_MEASURED, _llama_ref_flops, cuda),
    }


# ---- the DFlash route ------------------------------------------------------------------------------------------
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


def dflash_step(a, tcfg: dict, K: int, T: int, device: str, world: int, lengths=None) -> dict:
    """The DFlash route (speculators' model and trainer; FSDP over the ranks when there are several)."""
    from .dflash.train import C  # the route's own checks and layer config (its modules import nothing heavy)

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
        *_notes(a, T, cuda)[1:],
    ]
    return {
        "params": {k: p[k] for k in ("total", "trainable", "frozen")},
        "notes": notes,
        "bytes": {
            "weights": weights,
            "gradients": tr * F32 // world,
            "optimizer": tr * F32 * 2 // world,
            "activations": _acts(DFLASH_BYTES[cuda], feats),
        },
        "flops_per_token": flops // T,
        "tflops": _rate(LLAMA_MEASURED, _llama_ref_flops, cuda),
    }


_REF = dict(KIMI, num_hidden_layers=61, max_position_embeddings=262144, rms_norm_eps=1e-6)


def _mla_ref_flops(T: int) -> float:
    cfg = _mla_config(_REF, 3, None)
    return _mla_flops(cfg, mla_shapes(cfg, 3), T, 3)


def _llama_ref_flops(T: int) -> float:
    from .speculators.draft_config import draft_layer_config

    V = _REF["vocab_size"]
    dcfg = draft_layer_config(_REF)
    return _llama_flops(dcfg, llama_shapes(dcfg, 3, V), T, 3, V)


def _rate(measured: tuple[int, int], ref_flops, cuda: bool) -> float:
    """The effective TFLOP/s assumed: the route's rate measured on one H200 at Kimi-K2.5's width (CUDA), else
    CPU_TFLOPS."""
    if not cuda:
        return CPU_TFLOPS
    tok_s, T = measured
    return ref_flops(T) * tok_s / 1e12


def _notes(a, T: int, cuda: bool, compiled: bool = False) -> list[str]:
    """compiled: the route compiles the forward on CUDA, which the plan's figures do not count."""
    out = [f"activations: one micro-batch of {T} tokens, {a.ttt_steps} TTT steps, counted from the shapes"]
    if compiled and cuda:
        out.append(
            "counted as the eager step: speculators compiles the forward on CUDA (and its fused loss), which keeps "
            "less: an upper bound"
        )
    if a.optimizer != "adamw":
        out.append(
            f"optimizer state counted as AdamW's (two float32 values per trained weight); "
            f"--optimizer {a.optimizer} differs"
        )
    return out
