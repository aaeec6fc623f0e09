"""Train the MLA EAGLE-3 draft (`Eagle3DeepseekV2ForCausalLM`, what SGLang serves for Kimi-K2.x) from the
same hidden-state files the Llama path reads (`hs_{i}.safetensors`: token_ids [L], hidden_states [L, K+1, H]
= K aux states + the final pre-norm state).

The loss is speculators' kind: KL from the target's distribution (its lm_head over its final norm of the
final state) to the draft's, summed over `--ttt-steps` unrolled steps (see draft/arch/mla/net.forward_steps), the
embedding frozen (SGLang replaces it with the target's at load time), lm_head starting from the target's.
For the first SELF_BIAS_FRACTION of the steps each query's score for its own key gets a fading bonus (see
self_bias_at; without it the draft can stay at accuracy 0).
The checkpoint is what SGLang's Eagle3DeepseekV2ForCausalLM.load_weights reads: `layers.0.*` with q_a_proj +
kv_a_proj_with_mqa unfused, gate_proj/up_proj unstacked, bf16 safetensors, plus a config whose eagle_config
records the HF hidden_states indices (`hf_hidden_state_indices`, captured exactly with sglang_eagle3_ext on).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...draft.arch import mla
from ...draft.arch.mla.net import MLA_KEYS, Eagle3MLADraft, rope_scaling_of
from ...draft.keys import HF_INDICES_FIELD
from ..checkpoint import CKPT_DIR, STATE, Publisher, check_identity, read_resume_point
from ..data import find_hs_dir, list_hs_files
from ..distributed import current, on_main
from ..init_from import continuing_line, load_into, mla_config, mla_state_dict, read_draft, resumed_line
from ..loader import sample_length
from ..options import DEFAULT_EPOCHS, TrainOptions
from ..report import TrainDraftError, require_learned, say
from ..samples import SampleSpec, check_samples
from ..selection import Keeper
from ..target_view import EMBED, HEAD, NORM, read_tensors, text_config
from .config import check_lengths, check_settings, layer_ids_for
from .loop import HISTORY_KEYS
from .step import (  # noqa: F401 - also imported
    SELF_BIAS,
    SELF_BIAS_FRACTION,
    accuracy,
    save_state_dict,
    self_bias_at,  # from here by callers
    step_loss,
)

ARCH = mla.ARCH


def mla_draft_config(
    target_cfg: dict, layer_ids: list[int], intermediate_size: int | None = None, release_ids: list[int] | None = None
) -> dict:
    """The draft's config.json: the target's MLA geometry and RoPE, one layer, a dense MLP."""
    missing = [k for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim") if not target_cfg.get(k)]
    if missing:
        raise ValueError(
            f"the target config has no {missing[0]}: an MLA draft copies the target's MLA geometry "
            f"(use --draft-arch llama for a non-MLA target)"
        )

    cfg = {k: target_cfg[k] for k in MLA_KEYS if k in target_cfg}
    h = int(target_cfg["hidden_size"])
    cfg.update(
        architectures=[ARCH],
        model_type="deepseek_v3",
        hidden_size=h,
        target_hidden_size=h,
        intermediate_size=int(intermediate_size or target_cfg.get("intermediate_size") or 3 * h),
        num_hidden_layers=1,
        num_key_value_heads=int(target_cfg["num_attention_heads"]),
        hidden_act="silu",
        vocab_size=int(target_cfg["vocab_size"]),
        draft_vocab_size=int(target_cfg["vocab_size"]),
        tie_word_embeddings=False,
        rope_scaling=target_cfg.get("rope_scaling"),
        torch_dtype="bfloat16",
        eagle_config={
            "eagle_aux_hidden_state_layer_ids": list(release_ids or layer_ids),
            HF_INDICES_FIELD: list(layer_ids),
        },
    )
    if target_cfg.get("rope_parameters") and not cfg["rope_scaling"]:
        cfg["rope_parameters"] = target_cfg["rope_parameters"]
    if not rope_scaling_of(cfg):  # plain RoPE: SGLang clamps the draft there (YaRN targets carry their own length)
        cfg["max_position_embeddings"] = max(int(cfg.get("max_position_embeddings") or 0), 8192)
    return cfg


def save_checkpoint(model: Eagle3MLADraft, cfg: dict, out: Path) -> Path:
    return save_state_dict(model.state_dict(), cfg, out)


def load_checkpoint(path: Path):
    from safetensors.torch import load_file

    cfg = json.loads((Path(path) / "config.json").read_text())
    m = Eagle3MLADraft(cfg)
    m.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=True)
    return m


def _inputs(a: TrainOptions) -> dict:
    """What rank 0 reads once: the target's config, the files, the layer ids (the same rules as the Llama route)."""

    data, target = Path(a.data), Path(a.target)
    try:
        tcfg = text_config(target)
    except (OSError, ValueError) as e:
        raise TrainDraftError(f"--target {target}: cannot read its config.json ({e})") from e
    files = list_hs_files(find_hs_dir(data))
    layer_ids, src = layer_ids_for(a, int(tcfg["num_hidden_layers"]), data)
    check_settings(a, tcfg)
    return {"tcfg": tcfg, "files": files, "layer_ids": layer_ids, "src": src}


def _check_and_measure(a: TrainOptions, got: dict, world) -> list[int]:
    """Every rank checks its share of the files (training/samples.py); the lengths come from the headers."""
    from ..distributed import agree, on_main

    tcfg, files, layer_ids = got["tcfg"], got["files"], got["layer_ids"]
    spec = SampleSpec(
        len(layer_ids) + 1,
        int(tcfg["hidden_size"]),
        int(tcfg["vocab_size"]),
        f"{len(layer_ids)} aux layers {layer_ids} ({got['src']}) + the final state",
    )
    agree(lambda: check_samples(files[world.rank :: world.size], spec, say), world)
    return on_main(lambda: [sample_length(p) for p in files], world)


def _split(a: TrainOptions, lengths: list[int]) -> tuple[list[int], list[int]]:
    """(train, val) file indices: the layout's held-out files validate (draft/arch/mla: heldout); a training sample needs
    --ttt-steps + 2 tokens (fewer: skipped, said once)."""

    n = len(lengths)
    n_val = n - mla.heldout(n, a.train_ratio)[0]
    check_lengths(lengths, n - n_val, a.ttt_steps)
    train = [i for i in range(n - n_val) if lengths[i] >= a.ttt_steps + 2]
    if len(train) < n - n_val:
        say(
            f"{n - n_val - len(train)} training samples have fewer than {a.ttt_steps + 2} tokens "
            f"(--ttt-steps {a.ttt_steps} + 2): skipped"
        )
    return train, list(range(n - n_val, n))


def _model(a: TrainOptions, target: Path, cfg: dict, tcfg: dict, device: str):
    import torch

    torch.manual_seed(a.seed)
    t = read_tensors(target)
    if t[EMBED].shape[1] != int(tcfg["hidden_size"]):
        raise ValueError(f"{target}: embed width {t[EMBED].shape[1]} != hidden_size {tcfg['hidden_size']}")
    model = Eagle3MLADraft(cfg)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(t[EMBED].float())
        model.lm_head.weight.copy_(t[HEAD].float())
    model.embed_tokens.weight.requires_grad_(False)
    model.to(device).train()
    return model, t[HEAD].to(device), t[NORM].to(device), float(tcfg.get("rms_norm_eps") or 1e-6)


def summarize(hist: list, val, seconds: float, *, ttt: int, layer_ids, out, world, sched, init_from=None) -> dict:
    """The run's figures: losses and accuracies (means of the last 10 % of the steps), validation, and the
    throughput of this process (tokens/s, the loader's share of the step time; the first step's start-up left out)."""
    tail = hist[-max(1, len(hist) // 10) :]
    timed = hist[1:] or hist
    secs = sum(h["time_s"] for h in timed) or float("nan")

    def mean(xs):  # over what was measured: a NaN accuracy measured nothing
        xs = [x for x in xs if x == x]
        return sum(xs) / len(xs) if xs else float("nan")

    return {
        "arch": ARCH,
        "steps": len(hist),
        "first_loss": hist[0]["loss"] if hist else None,
        "final_loss": mean([h["loss"] for h in tail]),
        "train_acc": mean([h["accs"][0] for h in tail]),
        "train_acc_by_step": [mean([h["accs"][k] for h in tail]) for k in range(ttt)],
        "val_acc_by_step": val,
        "train_seconds": seconds,
        "saved": str(out),
        "layer_ids": layer_ids,
        "world_size": world.size,
        "global_batch": sched.G,
        "epochs": sched.epochs,
        "tokens_per_s_per_process": sum(h["tokens"] for h in timed) / secs,
        "loader_share": sum(h["fetch_s"] for h in timed) / secs,
        **({"init_from": str(init_from)} if init_from is not None else {}),
        "history": [{k: h[k] for k in HISTORY_KEYS} for h in hist],
    }


def train(a: TrainOptions, rule: dict) -> dict:
    """The MLA route of training.train_draft (`train --draft-arch mla`): same data, target and layer-id
    resolution as the Llama route; `rule`: how --out is written (TrainOptions.output_rule, already checked)."""
    import functools

    from .. import sharding
    from . import loop

    world, target, out = current(), Path(a.target), Path(a.out)
    got = on_main(lambda: _inputs(a), world)
    tcfg, files, layer_ids = got["tcfg"], got["files"], got["layer_ids"]
    lengths = _check_and_measure(a, got, world)
    train, val = _split(a, lengths)
    G, A = on_main(lambda: sharding.accumulation(a.global_batch, world.size), world)  # one refusal, from rank 0
    sched = loop.schedule(len(train), G, A, a.epochs, a.steps, DEFAULT_EPOCHS)
    state = on_main(lambda: read_resume_point(out, a.resume), world)
    say(
        f"MLA draft ({ARCH}): {len(files)} samples ({len(train)} train, {len(val)} val), aux layers {layer_ids} "
        f"({got['src']}), {sched.total} steps of {G} samples ({world.size} process(es) x {A}) on {world.device}"
    )
    try:
        release_ids = _release_ids(layer_ids)
        cfg = mla_draft_config(tcfg, layer_ids, a.intermediate_size, release_ids)
        init, cfg = _init_from(a, tcfg, cfg)  # with --init-from: DIR's network, the installed release's ids
        identity = {
            "arch": "mla",
            "seed": a.seed,
            "global_batch": G,
            "n_train": len(train),
            "layer_ids": layer_ids,
            "train_ratio": a.train_ratio,
            "intermediate_size": int(cfg["intermediate_size"]),
            "ttt_steps": a.ttt_steps,
        }
        on_main(lambda: check_checkpoint(out, state, identity, cfg, a.ttt_steps), world)  # before anything loads
        model, head, norm_w, eps = _model(a, target, cfg, tcfg, world.device)
        if init is not None:
            _load_init(init, model, state, a)
        keep = Keeper.for_run(a, state)  # which epoch's draft --out holds (--select-by)
        job = loop.Job(
            files=files,
            lengths=lengths,
            train=train,
            val=val,
            cfg=cfg,
            model=model,
            head=head,
            norm_w=norm_w,
            eps=eps,
            opts=a,
            world=world,
            device=world.device,
            sched=sched,
            publisher=Publisher(out, rule, {"arch": "mla", "target": str(target), "data": str(a.data)}, world, keep),
            identity=identity,
        )
        summ = functools.partial(
            summarize, ttt=a.ttt_steps, layer_ids=layer_ids, out=out, world=world, sched=sched, init_from=a.init_from
        )
        r = loop.run(job, state, summ, say)
        r["selection"] = keep.summary()
    except ValueError as e:
        from ...boundary import BadInput

        if isinstance(e, BadInput):  # outdir's refusals: already one line naming the fix
            raise
        raise TrainDraftError(str(e)) from e
    va = r["val_acc_by_step"] or [float("nan")]
    say(
        f"DONE steps={r['steps']} train_acc={r['train_acc']:.4f} (ttt accs "
        f"{' '.join(f'{x:.3f}' for x in r['train_acc_by_step'])}) loss {r['first_loss']:.4f}->{r['final_loss']:.4f} "
        f"val_acc={va[0]:.4f} tok/s/process={r['tokens_per_s_per_process']:.0f} loader={r['loader_share']:.1%} "
        f"time={r['train_seconds']:.1f}s out={out}"
    )
    on_main(lambda: require_learned(va[0], a.min_val_acc, out), world)
    return r


def check_checkpoint(out: Path, state: dict | None, identity: dict, cfg: dict, ttt_steps: int) -> None:
    """--resume: the checkpoint in --out against the draft `cfg` describes (training/resume.py)."""
    if state is None:
        return
    import torch

    from ..resume import check_history, check_model_file, check_optimizer, check_scheduler
    from .loop import CKPT_FILES

    check_identity(state, identity, out)
    d, gs = out / CKPT_DIR, state["global_step"]
    check_history(state, str(d / STATE), HISTORY_KEYS, accs=ttt_steps)
    with torch.device("meta"):
        model = Eagle3MLADraft(cfg)
    params = [(n, tuple(p.shape)) for n, p in model.named_parameters() if n != "embed_tokens.weight"]  # _optim's
    check_model_file(d / CKPT_FILES[0], dict(params))
    check_optimizer(d / CKPT_FILES[1], params, gs, by_name=False)
    check_scheduler(d / CKPT_FILES[2], gs, groups=1)


def _init_from(a: TrainOptions, tcfg: dict, cfg: dict):
    """(--init-from DIR as read, the draft's config: DIR's completed by `cfg`, a fresh run's), or (None, cfg);
    every rank reads DIR (the draft is small)."""
    if a.init_from is None:
        return None, cfg

    init = read_draft(a.init_from, tcfg)
    return init, mla_config(init, cfg)


def _load_init(init, model, state, a: TrainOptions) -> None:
    """DIR's weights into the model, all of them (the embeddings stay the target's), unless --resume continues
    from the run's own checkpoint."""

    if state is not None:
        say(resumed_line(init, a.out))
        return
    say(continuing_line(init, load_into(model, mla_state_dict(init, model), init.path)))


def _release_ids(layer_ids: list[int]):
    try:
        from ...draft.keys import installed_layout, release_aux_ids

        return release_aux_ids(layer_ids, installed_layout())[0]
    except Exception:  # noqa: BLE001 - no SGLang here: record the HF indices as-is
        return None
