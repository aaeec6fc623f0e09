"""The built-in tiny targets: small random DeepSeek-V3 models that SGLang serves, made on first use.

The default has the GPU host's reference shape (4 layers, hidden 1024, MLA, 16 routed experts), written
with transformers' own `DeepseekV3ForCausalLM` so it is also the hidden-state reference. TARGETS names
the others (a predictable walk for the round trip; Kimi-K2.5's width for costs that mean something);
a new built-in target is one more entry there (plus, when it is not a DeepSeek-V3, its own builder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import envs
from .._log import log_once
from ..outdir import OutputDirRefused, read_marker, writing

# Keys SGLang's deepseek_v2 reads that transformers does not write.
SGLANG_EXTRA_KEYS = {
    "moe_layer_freq": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "ep_size": 1,
    "norm_topk_prob": True,
    "num_nextn_predict_layers": 0,
    "aux_loss_alpha": 0.001,
    "seq_aux": True,
}
TINY_CONFIG = dict(
    vocab_size=4096,
    hidden_size=1024,
    intermediate_size=2048,
    moe_intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=8,
    n_shared_experts=1,
    n_routed_experts=16,
    num_experts_per_tok=4,
    n_group=1,
    topk_group=1,
    routed_scaling_factor=1.0,
    kv_lora_rank=512,
    q_lora_rank=256,
    qk_rope_head_dim=64,
    v_head_dim=128,
    qk_nope_head_dim=128,
    first_k_dense_replace=1,
    max_position_embeddings=4096,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)
# The round-trip target (`ensure_tiny_target(dir, **PREDICTABLE)`): residual branches scaled down so each
# hidden state is dominated by its token's embedding, and lm_head row v leans on the embedding of a random
# successor of v. Greedy decoding is then a walk a draft can learn, with a top logit far above bf16 kernel
# noise. On the purely random target, greedy continuations are chaotic and near-tied: transformers fp32 vs
# bf16 agreed on 5/16 sequences (48 tokens), and SGLang's EAGLE-3 verify vs plain decode differed on 22/32
# (0.5.16) -- so "speculation must not change greedy outputs" could not be tested there.
PREDICTABLE = dict(branch_scale=0.1, successor_weight=30.0)
# Kimi-K2.5's attention and widths (its config.json: hidden 7168, 64 heads, MLA ranks 1536/512, MoE
# intermediate 2048, top-8 routing), with few experts and layers so that a quick run fits one GPU.
KIMI_WIDTH = dict(
    hidden_size=7168,
    intermediate_size=18432,
    moe_intermediate_size=2048,
    num_attention_heads=64,
    num_key_value_heads=64,
    q_lora_rank=1536,
    kv_lora_rank=512,
    n_routed_experts=16,
    num_experts_per_tok=8,
)
# A target where speculation pays (the round trip's `SGE3_RT_TARGET=kimi`): Kimi-K2.5's width, 10 layers
# (~16 GB bf16), so a 1-layer draft step costs a fraction of a target step (on the 1024-wide, 4-layer target
# the two cost about the same: speedup 0.32x). Routing pinned to 8 of the 16 experts (route_bias): a verify
# of 4 tokens then reads the expert weights a 1-token decode step reads, as on a dense model; with free
# routing it would read ~15 of 16 experts (1.7x a decode step's weights), which by our estimate alone caps
# the batch-1 speedup near 1.7x at this expert count. The walk's top logit stands out by ~sqrt(hidden) *
# std(embed) / rms(state) standard deviations of the other logits, and the branches grow with the width:
# PREDICTABLE's 0.1 keeps the walk on 12 % of tokens here; 0.02 keeps it on all, the worst top-1 margin
# 190 logits (3.7 std of the others; bf16 noise is ~1) -- tests/unit/tiny/test_tiny_kimi_width.py.
KIMI_PREDICTABLE = dict(KIMI_WIDTH, num_hidden_layers=10, branch_scale=0.02, successor_weight=30.0, route_bias=1.0)
# Named built-in targets: name -> ensure_tiny_target arguments; each is cached in its own folder.
TARGETS = {
    "tiny-deepseek-v3": {},
    "tiny-predictable": PREDICTABLE,
    "kimi-width-deepseek-v3": dict(KIMI_WIDTH),  # 4 layers: benchmarks/bench_dump.py --kimi-width
    "kimi-width-predictable": KIMI_PREDICTABLE,
}


def default_dir() -> Path:

    return Path(envs.get(envs.CACHE)) / "tiny-deepseek-v3"


def build_model(
    seed: int = 0,
    branch_scale: float = 1.0,
    successor_weight: float = 0.0,
    route_bias: float = 0.0,
    device: str | None = None,
    **overrides,
):
    """The target in memory (bf16 transformers DeepseekV3ForCausalLM); ensure_tiny_target documents the knobs."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(**{**TINY_CONFIG, **overrides})
    if device is None:
        device = "cuda" if int(cfg.hidden_size) >= 4096 and torch.cuda.is_available() else "cpu"
    torch.manual_seed(seed)
    if device == "cpu":
        model = DeepseekV3ForCausalLM(cfg)
    else:  # drawn in place, in the dtype it is saved in: no fp32 copy, no host-side init
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(device):
                model = DeepseekV3ForCausalLM(cfg)
        finally:
            torch.set_default_dtype(prev)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight", "down_proj")):  # what each branch adds
                p.mul_(branch_scale)
        perm = torch.randperm(cfg.vocab_size, generator=torch.Generator().manual_seed(seed + 1))
        model.lm_head.weight.add_(successor_weight * model.model.embed_tokens.weight[perm])
        if route_bias:
            for name, b in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    b.zero_()
                    b[: cfg.num_experts_per_tok] = route_bias
    return model.to(torch.bfloat16)


def ensure_target(name: str, out: str | os.PathLike | None = None, **kw) -> Path:
    """A named built-in target (TARGETS), in `out` or the cache folder of that name."""
    if name not in TARGETS:
        raise ValueError(f"unknown built-in target {name!r}; available: {', '.join(TARGETS)}")
    return ensure_tiny_target(out or default_dir().with_name(name), **{**TARGETS[name], **kw})


def builtin_dir(name: str) -> Path:
    """Where the preset model `builtin:NAME` lives in the cache (tiny-deepseek-v3, tiny-kimi-k25)."""
    return default_dir().with_name(name)


def ensure_tiny_target(
    out: str | os.PathLike | None = None,
    seed: int = 0,
    branch_scale: float = 1.0,
    successor_weight: float = 0.0,
    route_bias: float = 0.0,
    device: str | None = None,
    **overrides,
) -> Path:
    """Write the tiny model to `out` (default: the cache) unless a complete copy is there.
    overrides: DeepseekV3Config fields; branch_scale / successor_weight: see PREDICTABLE;
    route_bias > 0 pins MoE routing: the first num_experts_per_tok experts get that score bonus
    (e_score_correction_bias), so every token picks them. Random routers sit on near-ties, and a
    flipped expert moves a token's state by far more than bf16 kernel noise (transformers bf16 vs fp32:
    worst token 0.994 after the first MoE layer, every such token routed differently); pinned, the
    MoE kernels still run and bf16 vs fp32 stays >= 0.99996 on every token.
    device: where the random weights are drawn (default: CUDA for hidden >= 4096 when there is one -- a
    Kimi-width model is drawn there in bf16 in seconds instead of minutes of CPU fp32 init -- else the CPU,
    whose seeded weights the 1024-wide targets' measurements were made with)."""
    out = Path(out) if out else default_dir()
    settings = dict(
        seed=seed, branch_scale=branch_scale, successor_weight=successor_weight, route_bias=route_bias, **overrides
    )
    if reuse_existing(out, "tiny", settings):
        return out
    import torch

    log_once("tiny", "making the tiny DeepSeek-V3 target in %s (first use, ~20 s)", out)
    try:
        with writing(out, tool="tiny", flag="OUT", record={"settings": settings}) as tmp:
            model = build_model(
                seed=seed,
                branch_scale=branch_scale,
                successor_weight=successor_weight,
                route_bias=route_bias,
                device=device,
                **overrides,
            )
            device = str(next(model.parameters()).device)
            model.save_pretrained(tmp, safe_serialization=True)
            p = tmp / "config.json"
            c = json.loads(p.read_text())
            c.update(SGLANG_EXTRA_KEYS)
            c["torch_dtype"] = "bfloat16"
            p.write_text(json.dumps(c, indent=2))
            (tmp / ".complete").touch()
    except OutputDirRefused:
        if reuse_existing(out, "tiny", settings):  # another process made the same target meanwhile
            return out
        raise
    if device != "cpu":  # the caller goes on to start servers on this GPU
        del model
        torch.cuda.empty_cache()
    return out


def reuse_existing(out: Path, tool: str, settings: dict) -> bool:
    """True when `out` already holds this built-in target (made with `settings`); a copy made with other
    settings is refused rather than served as if it were the one asked for."""
    if not (out / ".complete").exists():
        return False

    try:
        marker = read_marker(out)
    except ValueError:
        marker = None
    if marker is not None and marker["tool"] != tool:
        raise OutputDirRefused(out, f"holds the output of `{marker['tool']}`, not a {tool} target; give another folder")
    made = (marker or {}).get("settings")
    if isinstance(made, dict) and made != json.loads(json.dumps(settings, default=str)):
        raise OutputDirRefused(
            out,
            f"holds a {tool} target made {settings_words(made, settings)}; give another "
            f"folder, or remove this one to remake it",
        )
    return True


def settings_words(made: dict, asked: dict) -> str:
    """How two targets' settings differ, in the command's flags: 'with --predictable, asked without it'."""

    def predictable(d):
        return all(d.get(k) == v for k, v in PREDICTABLE.items())

    there, wanted = [], []
    if predictable(made) != predictable(asked):
        there.append("with --predictable" if predictable(made) else "without --predictable")
        wanted.append("without it" if predictable(made) else "with it")
    if made.get("seed") != asked.get("seed"):
        there.append(f"with --seed {made.get('seed')}")
        wanted.append(f"--seed {asked.get('seed')}")
    others = [k for k in asked if k not in ("seed", *PREDICTABLE) and made.get(k) != asked[k]]
    if others or not there:
        there.append("with " + ", ".join(f"{k}={made.get(k)}" for k in others or asked))
        wanted.append(", ".join(f"{k}={asked[k]}" for k in others or asked))
    return f"{' and '.join(there)}, asked {' and '.join(wanted)}"
