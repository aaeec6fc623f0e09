"""What one training step of the MLA draft computes, shared by the loop (training/mla/loop.py) and the route
(training/mla/train.py): the loss and its warm-up bias, the accuracy, and the draft's file as SGLang loads it."""

from __future__ import annotations

import json
from pathlib import Path

from ..report import non_finite


def save_state_dict(state_dict: dict, cfg: dict, out: Path) -> Path:
    """The draft as SGLang loads it: bf16 safetensors + config.json; never a non-finite one (ValueError)."""
    import torch
    from safetensors.torch import save_file

    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in state_dict.items()}
    bad = non_finite(sd)
    if bad:
        raise ValueError(
            f"the trained draft's weights are not finite ({', '.join(bad[:3])}"
            f"{', ...' if len(bad) > 3 else ''}): training diverged; not saved (--out keeps the last "
            f"finite epoch, if any); lower --lr"
        )
    out.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def _rms(x, w, eps):
    import torch

    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


# The warm-up that gets the MLA draft off its plateau: the one place the next token enters the
# draft is its embedding, through the attention's value of the query's own row; at init the attention spreads
# over the whole prefix, so that value arrives diluted and its path learns too slowly to teach the attention to
# look at it (trained per sample, the draft sat at accuracy 0 for 2400 steps on the predictable Kimi target).
# A bias on each query's own key, fading from SELF_BIAS to 0 over the first SELF_BIAS_FRACTION of the steps,
# trains the value path first; the attention's own weights then take over (the saved model has no bias).
SELF_BIAS, SELF_BIAS_FRACTION = 8.0, 0.3


def self_bias_at(step: int, steps: int) -> float:
    """The own-key attention bias at optimizer step `step` (1-based) of `steps`."""
    span = max(1, int(steps * SELF_BIAS_FRACTION))
    return SELF_BIAS * max(0.0, 1.0 - (step - 1) / span)


def step_loss(model, ids, hs, head, norm_w, eps, steps: int, dtype, self_bias: float = 0.0):
    """Sum over the unrolled steps of the mean KL(target || draft) over the rows each step can use;
    returns (loss, per-step argmax agreement)."""
    import torch
    import torch.nn.functional as F

    T = ids.shape[0]
    if T < steps + 2:
        return None, None
    aux, final = hs[:, :-1].reshape(T, -1).to(dtype), hs[:, -1]
    with torch.no_grad():
        teacher = (_rms(final[1:], norm_w, eps) @ head.float().T).float()  # row p: target at p+1
    inputs = torch.cat([ids[1:], ids[-1:]])  # row p: token p+1
    logits = model.forward_steps(inputs, aux, steps, self_bias)
    loss, accs = 0.0, []
    for k, lg in enumerate(logits):
        lg, tch = lg[k : T - 1].float(), teacher[k:]
        loss = loss + F.kl_div(F.log_softmax(lg, -1), F.log_softmax(tch, -1), log_target=True, reduction="batchmean")
        valid = torch.isfinite(lg).all(-1) & torch.isfinite(tch).all(-1)
        accs.append(accuracy(lg.argmax(-1), tch.argmax(-1), valid))
    return loss, accs


def accuracy(pred, ref, valid=None) -> float:
    """Share of positions where pred == ref among the valid ones; NaN when none is valid (nothing measured:
    never a perfect score, e.g. from NaN rows whose argmaxes all agree)."""
    ok = pred == ref
    if valid is not None:
        ok = ok[valid]
    return float(ok.float().mean()) if ok.numel() else float("nan")
