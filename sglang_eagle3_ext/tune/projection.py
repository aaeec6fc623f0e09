"""The speedup projected to Kimi-K2.5's 61 layers at TP 8 from the parts measured at the timing servers' TP.

Assumptions (reported beside the figures):
- the target's step is a per-layer part times its layers plus its lm_head (vocab x hidden bf16 weights read once
  at HBM_BYTES_PER_S, split over the TP ranks); verify scales the same way (its per-layer part from the fitted
  verify);
- from the measured TP m to TP 8 each layer's part and the lm_head scale by m / 8 (none when m is 8); parts
  measured without TP (m = 1) gain two all-reduces of ALLREDUCE_MS per layer, parts measured with TP hold theirs;
- the draft (one layer + its lm_head) and its extend keep their measured cost but for the lm_head's share, which
  scales by m / 8, plus one all-reduce per step when measured without TP;
- acceptance is the user's (eval's), unchanged by the target's depth.
"""

from __future__ import annotations

HBM_BYTES_PER_S = 4.0e12
ALLREDUCE_MS = 0.015
LAYERS = 61
TP = 8


def lm_head_ms(vocab: int, hidden: int) -> float:
    return vocab * hidden * 2 / HBM_BYTES_PER_S * 1e3


def project(
    target_step: float,
    verify: float,
    draft_step: float,
    extend: float,
    steps: int,
    accept: float,
    layers: int,
    vocab: int,
    hidden: int,
    to_layers: int = LAYERS,
    tp: int = TP,
    from_tp: int = 1,
) -> dict:
    """`from_tp`: the TP the parts were measured at; only the difference to `tp` is applied."""
    head = lm_head_ms(vocab, hidden)
    head_m = head / from_tp  # the lm_head's share of what was measured
    scale = from_tp / tp
    ar = ALLREDUCE_MS if from_tp == 1 and tp > 1 else 0.0  # measured with TP: the all-reduces are in the parts
    per_layer_t = max(target_step - head_m, 0.0) / layers
    per_layer_v = max(verify - head_m, 0.0) / layers
    t61 = head / tp + to_layers * (per_layer_t * scale + 2 * ar)
    v61 = head / tp + to_layers * (per_layer_v * scale + 2 * ar)
    d61 = max(draft_step - head_m, 0.0) + head / tp + ar
    e61 = max(extend - head_m, 0.0) + head / tp + ar
    it = v61 + steps * d61 + e61
    terms = {"verify": v61, "draft steps": steps * d61, "draft extend": e61}
    return {
        "target_step_ms": round(t61, 4),
        "iteration_ms": round(it, 4),
        "verify_ms": round(v61, 4),
        "draft_step_ms": round(d61, 4),
        "extend_ms": round(e61, 4),
        "speedup": accept * t61 / it,
        "dominant": max(terms, key=terms.get),
        "measured_speedup_model": accept * target_step / (verify + steps * draft_step + extend),
    }


ASSUMPTIONS = [
    f"target step = lm_head (vocab x hidden bf16 read at {HBM_BYTES_PER_S / 1e12:g} TB/s) + layers x a per-layer part; "
    f"verify the same with its own per-layer part",
    f"TP {TP} from the timing servers' TP m: per-layer parts and every lm_head scaled by m / {TP}; measured at "
    f"m = 1, two all-reduces of {ALLREDUCE_MS * 1e3:g} us added per target layer, one per draft step and per extend",
    "the draft's and extend's non-lm_head cost unchanged (one small layer: launch-bound, not sped up by TP)",
    "acceptance unchanged by the target's depth (eval's per-steps accept length on the user's dump)",
]
