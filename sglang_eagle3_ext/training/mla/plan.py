"""The MLA route's `train --dry-run` step (training/plan.py; what the steps share: training/plan_models.py):
its settings checked as the run checks them, then its draft counted from the target's config."""

from __future__ import annotations

from ..plan_models import BF16, F32, REF, acts, plan_notes, rate

# bytes per element at the activation peak: {cuda: {feature: bytes}} (features: see _mla_features)
MLA_BYTES = {
    False: dict(
        TV_S=11.5, TV=14.0, TT_S2=5.4, TT_S=5.3, TH_S=44.3, TI_S=15.9, Tq_S=13.0, Tv_S=18.6, Tlat_S=6.5, TKH=4.9, VH=1.3
    ),
    True: dict(
        TV_S=9.7, TV=17.3, TT_S2=2.1, TT_S=4.5, TH_S=38.2, TI_S=8.2, Tq_S=5.3, Tv_S=9.7, Tlat_S=8.7, TKH=0.3, VH=1.0
    ),
}
MLA_MEASURED = (8827, 2048)  # (tokens/s, tokens per sample) on one H200 at Kimi-K2.5's width (plan_models.KIMI)


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
    from .train import mla_draft_config  # the route's own (it imports torch for the RoPE rule; builds nothing)

    return mla_draft_config(tcfg, list(range(1, K + 1)), intermediate_size)


def step(a, tcfg: dict, K: int, T: int, device: str, world: int = 1, lengths=None) -> dict:
    """The MLA route (one process per rank, the draft replicated: DDP)."""
    from ...draft.arch import mla
    from .config import check_lengths, check_settings, layer_ids_for

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
        "notes": plan_notes(a, T, cuda),
        "bytes": {
            "weights": weights,
            "gradients": tr * F32,
            "optimizer": tr * F32 * 2,
            "activations": acts(MLA_BYTES[cuda], _mla_features(cfg, K, T, a.ttt_steps)),
        },
        "flops_per_token": flops,
        "tflops": rate(MLA_MEASURED, _mla_ref_flops, cuda),
    }


def _mla_ref_flops(T: int) -> float:
    cfg = _mla_config(REF, 3, None)
    return _mla_flops(cfg, mla_shapes(cfg, 3), T, 3)
