"""The built-in tiny target: a small random DeepSeek-V3 that SGLang serves, made on first use.

Same shape as the GPU host's reference model (4 layers, hidden 1024, MLA, 16 routed experts),
written with transformers' own `DeepseekV3ForCausalLM` so it is also the hidden-state reference.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

# Keys SGLang's deepseek_v2 reads that transformers does not write.
SGLANG_EXTRA_KEYS = {"moe_layer_freq": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "ep_size": 1,
                     "norm_topk_prob": True, "num_nextn_predict_layers": 0, "aux_loss_alpha": 0.001,
                     "seq_aux": True}
TINY_CONFIG = dict(
    vocab_size=4096, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
    num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
    n_shared_experts=1, n_routed_experts=16, num_experts_per_tok=4, n_group=1, topk_group=1,
    routed_scaling_factor=1.0, kv_lora_rank=512, q_lora_rank=256, qk_rope_head_dim=64,
    v_head_dim=128, qk_nope_head_dim=128, first_k_dense_replace=1, max_position_embeddings=4096,
    rope_theta=10000.0, tie_word_embeddings=False,
)
# The round-trip target (`ensure_tiny_target(dir, **PREDICTABLE)`): residual branches scaled down so each
# hidden state is dominated by its token's embedding, and lm_head row v leans on the embedding of a random
# successor of v. Greedy decoding is then a walk a draft can learn, with a top logit far above bf16 kernel
# noise. On the purely random target, greedy continuations are chaotic and near-tied: transformers fp32 vs
# bf16 agreed on 5/16 sequences (48 tokens), and SGLang's EAGLE-3 verify vs plain decode differed on 22/32
# (0.5.16) -- so "speculation must not change greedy outputs" could not be tested there.
PREDICTABLE = dict(branch_scale=0.1, successor_weight=30.0)


def default_dir() -> Path:
    base = os.environ.get("SGLANG_EAGLE3_EXT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sglang_eagle3_ext")
    return Path(base) / "tiny-deepseek-v3"


def ensure_tiny_target(out: str | os.PathLike | None = None, seed: int = 0, branch_scale: float = 1.0,
                       successor_weight: float = 0.0, route_bias: float = 0.0, **overrides) -> Path:
    """Write the tiny model to `out` (default: the cache) unless a complete copy is there.
    overrides: DeepseekV3Config fields; branch_scale / successor_weight: see PREDICTABLE;
    route_bias > 0 pins MoE routing: the first num_experts_per_tok experts get that score bonus
    (e_score_correction_bias), so every token picks them. Random routers sit on near-ties, and a
    flipped expert moves a token's state by far more than bf16 kernel noise (transformers bf16 vs fp32:
    worst token 0.994 after the first MoE layer, every such token routed differently); pinned, the
    MoE kernels still run and bf16 vs fp32 stays >= 0.99996 on every token."""
    out = Path(out) if out else default_dir()
    done = out / ".complete"
    if done.exists():
        return out
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from ._log import log_once

    log_once("tiny", "making the tiny DeepSeek-V3 target in %s (first use, ~20 s)", out)
    cfg = DeepseekV3Config(**{**TINY_CONFIG, **overrides})
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(cfg)
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
    model = model.to(torch.bfloat16)
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    p = tmp / "config.json"
    c = json.loads(p.read_text())
    c.update(SGLANG_EXTRA_KEYS)
    c["torch_dtype"] = "bfloat16"
    p.write_text(json.dumps(c, indent=2))
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)
    done.touch()
    return out


if __name__ == "__main__":
    import sys

    print(ensure_tiny_target(sys.argv[1] if len(sys.argv) > 1 else None))
