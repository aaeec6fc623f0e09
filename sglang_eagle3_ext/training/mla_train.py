"""Train the MLA EAGLE-3 draft (`Eagle3DeepseekV2ForCausalLM`, what SGLang serves for Kimi-K2.x) from the
same hidden-state files the Llama path reads (`hs_{i}.safetensors`: token_ids [L], hidden_states [L, K+1, H]
= K aux states + the final pre-norm state).

The loss is speculators' kind: KL from the target's distribution (its lm_head over its final norm of the
final state) to the draft's, summed over `--ttt-steps` unrolled steps (see mla_draft.forward_steps), the
embedding frozen (SGLang replaces it with the target's at load time), lm_head starting from the target's.
For the first SELF_BIAS_FRACTION of the steps each query's score for its own key gets a fading bonus (see
self_bias_at; without it the draft can stay at accuracy 0).
The checkpoint is what SGLang's Eagle3DeepseekV2ForCausalLM.load_weights reads: `layers.0.*` with q_a_proj +
kv_a_proj_with_mqa unfused, gate_proj/up_proj unstacked, bf16 safetensors, plus a config whose eagle_config
records the HF hidden_states indices (`hf_hidden_state_indices`, captured exactly with sglang_eagle3_ext on).
"""
from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

from .mla_draft import MLA_KEYS, Eagle3MLADraft, rope_scaling_of
from .target_view import EMBED, HEAD, NORM, read_tensors, text_config

ARCH = "Eagle3DeepseekV2ForCausalLM"


def mla_draft_config(target_cfg: dict, layer_ids: list[int], intermediate_size: int | None = None,
                     release_ids: list[int] | None = None) -> dict:
    """The draft's config.json: the target's MLA geometry and RoPE, one layer, a dense MLP."""
    missing = [k for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim") if not target_cfg.get(k)]
    if missing:
        raise ValueError(f"the target config has no {missing[0]}: an MLA draft copies the target's MLA geometry "
                         f"(use --draft-arch llama for a non-MLA target)")
    from ..draft.keys import HF_INDICES_FIELD

    cfg = {k: target_cfg[k] for k in MLA_KEYS if k in target_cfg}
    h = int(target_cfg["hidden_size"])
    cfg.update(
        architectures=[ARCH], model_type="deepseek_v3", hidden_size=h, target_hidden_size=h,
        intermediate_size=int(intermediate_size or target_cfg.get("intermediate_size") or 3 * h),
        num_hidden_layers=1, num_key_value_heads=int(target_cfg["num_attention_heads"]), hidden_act="silu",
        vocab_size=int(target_cfg["vocab_size"]), draft_vocab_size=int(target_cfg["vocab_size"]),
        tie_word_embeddings=False, rope_scaling=target_cfg.get("rope_scaling"), torch_dtype="bfloat16",
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(release_ids or layer_ids),
                      HF_INDICES_FIELD: list(layer_ids)},
    )
    if target_cfg.get("rope_parameters") and not cfg["rope_scaling"]:
        cfg["rope_parameters"] = target_cfg["rope_parameters"]
    if not rope_scaling_of(cfg):   # plain RoPE: SGLang clamps the draft there (YaRN targets carry their own length)
        cfg["max_position_embeddings"] = max(int(cfg.get("max_position_embeddings") or 0), 8192)
    return cfg


def non_finite(state_dict: dict) -> list[str]:
    """Names of the floating tensors holding NaN/Inf (a diverged run; never saved as a draft)."""
    import torch

    return [k for k, v in state_dict.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]


def save_checkpoint(model: Eagle3MLADraft, cfg: dict, out: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    bad = non_finite(sd)
    if bad:
        raise ValueError(f"the trained draft's weights are not finite ({', '.join(bad[:3])}"
                         f"{', ...' if len(bad) > 3 else ''}): training diverged; nothing saved; lower --lr")
    out.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def load_checkpoint(path: Path):
    from safetensors.torch import load_file

    cfg = json.loads((Path(path) / "config.json").read_text())
    m = Eagle3MLADraft(cfg)
    m.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=True)
    return m


def _rms(x, w, eps):
    import torch

    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _sample(path: Path, device):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        ids = f.get_tensor("token_ids").long().to(device)
        hs = f.get_tensor("hidden_states").to(device)
    return ids, hs


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
        teacher = (_rms(final[1:], norm_w, eps) @ head.float().T).float()          # row p: target at p+1
    inputs = torch.cat([ids[1:], ids[-1:]])                                          # row p: token p+1
    logits = model.forward_steps(inputs, aux, steps, self_bias)
    loss, accs = 0.0, []
    for k, lg in enumerate(logits):
        lg, tch = lg[k: T - 1].float(), teacher[k:]
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


def train_mla(*, data_files: list[Path], target: Path, out: Path, layer_ids: list[int], steps: int, lr: float,
              ttt_steps: int, device: str, seed: int, intermediate_size: int | None, log_every: int,
              say=print, val_ratio: float = 0.05) -> dict:
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tcfg = text_config(target)
    try:
        from ..draft.keys import installed_layout, release_aux_ids

        release_ids = release_aux_ids(layer_ids, installed_layout())[0]
    except Exception:  # noqa: BLE001 - no SGLang here: record the HF indices as-is
        release_ids = None
    cfg = mla_draft_config(tcfg, layer_ids, intermediate_size, release_ids)
    t = read_tensors(target)
    if t[EMBED].shape[1] != int(tcfg["hidden_size"]):
        raise ValueError(f"{target}: embed width {t[EMBED].shape[1]} != hidden_size {tcfg['hidden_size']}")
    model = Eagle3MLADraft(cfg)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(t[EMBED].float())
        model.lm_head.weight.copy_(t[HEAD].float())
    model.embed_tokens.weight.requires_grad_(False)
    model.to(device).train()
    head, norm_w = t[HEAD].to(device), t[NORM].to(device)
    eps = float(tcfg.get("rms_norm_eps") or 1e-6)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32

    files = list(data_files)
    n_val = max(1, int(len(files) * val_ratio)) if len(files) > 1 else 0
    val, train = files[len(files) - n_val:], files[: len(files) - n_val]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps)))))
    hist, t0 = [], time.perf_counter()
    order: list[Path] = []
    for step in range(1, steps + 1):
        if not order:
            order = train[:]
            rng.shuffle(order)
        ids, hs = _sample(order.pop(), device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda")):
            loss, accs = step_loss(model, ids, hs, head, norm_w, eps, ttt_steps, dtype, self_bias_at(step, steps))
        if loss is None:
            continue
        if not bool(torch.isfinite(loss.detach())):
            raise ValueError(f"the loss is not finite at step {step} (lr {lr}): training diverged; the draft's "
                             f"weights would not be finite; nothing saved; lower --lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        hist.append({"step": step, "loss": float(loss.detach()), "accs": accs})
        if step == 1 or step % log_every == 0 or step == steps:
            say(f"step {step}/{steps} loss={float(loss.detach()):.4f} " + " ".join(f"acc{k}={a:.3f}" for k, a in enumerate(accs))
                + f" elapsed={time.perf_counter() - t0:.1f}s")
    if not hist:
        raise ValueError(f"no training step ran: every training sample has fewer than {ttt_steps + 2} tokens "
                         f"(--ttt-steps {ttt_steps} + 2)")
    model.eval()
    val_accs = []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda")):
        for p in val:
            ids, hs = _sample(p, device)
            _, accs = step_loss(model, ids, hs, head, norm_w, eps, ttt_steps, dtype)
            if accs:
                val_accs.append(accs)
    save_checkpoint(model.float().cpu(), cfg, out)
    tail = hist[-max(1, len(hist) // 10):]

    def mean(xs):   # over what was measured: a NaN accuracy measured nothing
        xs = [x for x in xs if x == x]
        return sum(xs) / len(xs) if xs else float("nan")
    return {"arch": ARCH, "steps": len(hist), "first_loss": hist[0]["loss"] if hist else None,
            "final_loss": mean([h["loss"] for h in tail]), "train_acc": mean([h["accs"][0] for h in tail]),
            "train_acc_by_step": [mean([h["accs"][k] for h in tail]) for k in range(ttt_steps)],
            "val_acc_by_step": [mean([a[k] for a in val_accs]) for k in range(ttt_steps)] if val_accs else None,
            "train_seconds": time.perf_counter() - t0, "saved": str(out), "layer_ids": layer_ids}


def train_from_args(a) -> dict:
    """`train_draft --draft-arch mla`: same data, target and layer-id resolution as the Llama path."""
    import torch

    from ..files import outdir
    from ..cli.train import DEFAULT_EPOCHS, output_rule
    from .data import (TrainDraftError, _say, find_hs_dir, list_hs_files, parse_layer_ids,
                       read_layer_ids_from_metadata, require_learned)
    from .samples import SampleSpec, check_samples

    data, target, out = Path(a.data), Path(a.target), Path(a.out)
    rule = output_rule(a)
    outdir.check(out, **rule)                      # before anything is read or written
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        tcfg = text_config(target)
    except (OSError, ValueError) as e:
        raise TrainDraftError(f"--target {target}: cannot read its config.json ({e})") from e
    missing = [k for k in ("num_hidden_layers", "hidden_size", "vocab_size") if k not in tcfg]
    if missing:
        raise TrainDraftError(f"--target {target}: config.json has no {missing[0]}; pass the target model's directory")
    n = int(tcfg["num_hidden_layers"])
    files = list_hs_files(find_hs_dir(data))
    layer_ids, src = parse_layer_ids(a.layer_ids), "--layer-ids"
    if layer_ids is None:
        layer_ids, src = read_layer_ids_from_metadata(data)
    if layer_ids is None:
        layer_ids, src = [2, n // 2, n - 3], "default [2, n//2, n-3]"
    if len(set(layer_ids)) != len(layer_ids) or min(layer_ids) < 0 or max(layer_ids) >= n:
        raise TrainDraftError(f"layer ids {layer_ids} ({src}) must be distinct HF hidden_states indices in [0, {n - 1}]")
    if getattr(a, "num_layers", 1) != 1:
        raise TrainDraftError("--draft-arch mla: SGLang's MLA EAGLE-3 draft has exactly one layer (--num-layers 1)")
    if a.draft_vocab_size not in (None, int(tcfg["vocab_size"])):
        raise TrainDraftError("--draft-arch mla trains the full target vocabulary (no --draft-vocab-size)")
    check_samples(files, SampleSpec(len(layer_ids) + 1, int(tcfg["hidden_size"]), int(tcfg["vocab_size"]),
                                    f"{len(layer_ids)} aux layers {layer_ids} ({src}) + the final state"), _say)
    steps = a.steps or (a.epochs or DEFAULT_EPOCHS) * len(files)
    _say(f"MLA draft ({ARCH}): {len(files)} samples, aux layers {layer_ids} ({src}), {steps} steps on {device}")
    try:
        with outdir.writing(out, **rule, record={"arch": "mla", "target": str(target), "data": str(data)}) as tmp:
            r = train_mla(data_files=files, target=target, out=tmp, layer_ids=layer_ids, steps=steps, lr=a.lr,
                          ttt_steps=a.ttt_steps, device=device, seed=a.seed, intermediate_size=a.intermediate_size,
                          log_every=a.log_every, say=_say)
            r["saved"] = str(out)
            (tmp / "train_summary.json").write_text(json.dumps(r, indent=2, default=str))
    except outdir.OutputDirRefused:
        raise
    except ValueError as e:
        raise TrainDraftError(str(e)) from e
    va = r["val_acc_by_step"] or [float("nan")]
    _say(f"DONE steps={r['steps']} train_acc={r['train_acc']:.4f} (ttt accs "
         f"{' '.join(f'{x:.3f}' for x in r['train_acc_by_step'])}) loss {r['first_loss']:.4f}->{r['final_loss']:.4f} "
         f"val_acc={va[0]:.4f} time={r['train_seconds']:.1f}s out={out}")
    require_learned(va[0], getattr(a, "min_val_acc", 0.0), out)
    return r
