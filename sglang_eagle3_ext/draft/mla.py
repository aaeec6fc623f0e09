"""Rules of SGLang's MLA EAGLE-3 draft class `Eagle3DeepseekV2ForCausalLM` (models/kimi_k25_eagle3.py, 0.5.14+).

Kimi-K2.5/K2.6's published drafts: one decoder layer with DeepSeek MLA attention whose q/kv
down-projections take cat(input_layernorm(embed), hidden_norm(target states)) = 2 x hidden, a dense
MLP, and `fc` over K aux states (EAGLE-3.1 adds `fc_norm` per aux chunk and `norm_output`).
What the release's own load_weights does, and where it fails silently:
  - `layers.0.*` -> `model.midlayer.*`; anything else gets `model.` (a `model.`-prefixed key is dropped);
  - `q_a_proj` + `kv_a_proj_with_mqa` are cached and concatenated into `fused_qkv_a_proj_with_mqa`
    once both arrived: one half missing leaves the projection uninitialised, without a word;
  - a pre-fused `fused_qkv_a_proj_with_mqa` key is read as a kv half (its name contains it) and dropped;
  - `num_aux_hidden_states` is not read: K = len(eagle_aux_hidden_state_layer_ids), default 3;
  - `draft_vocab_size` missing means "take the target's lm_head" (no error, unlike the Llama class);
  - `post_load_weights` splits `kv_b_proj` into w_kc / w_vc.
"""
from __future__ import annotations

from . import errors as E
from .errors import Problem

ARCH = "Eagle3DeepseekV2ForCausalLM"
SINCE = "0.5.14"
ATTN = "layers.0.self_attn."
Q_HALF, KV_HALF = ATTN + "q_a_proj.weight", ATTN + "kv_a_proj_with_mqa.weight"
FUSED = ATTN + "fused_qkv_a_proj_with_mqa.weight"
DIM_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def config_fields(cfg: dict, layout, where: str) -> tuple[dict, list[Problem]]:
    """MLA-specific DraftSpec fields and config problems."""
    P: list[Problem] = []
    if not getattr(layout, "mla_draft", False):
        P.append(Problem(E.DRAFT_CLASS, f"{where}: architectures [\"{ARCH}\"] (an MLA EAGLE-3 draft, e.g. Kimi-K2.5's) "
                                        f"but SGLang {layout.release} has no such class (added in {SINCE}): it would not "
                                        f"build this draft. Use SGLang >= {SINCE}"))
    bad = [f for f in DIM_FIELDS if not isinstance(cfg.get(f), int) or cfg.get(f) <= 0]
    for f in bad:
        P.append(Problem(E.CONFIG_MISSING, f"{where}: `{f}` missing or not a positive integer — SGLang's MLA draft layer "
                                           f"needs it (q_lora_rank null makes it refuse to start)"))
    if cfg.get("num_hidden_layers") not in (None, 1):
        P.append(Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: num_hidden_layers={cfg.get('num_hidden_layers')}, SGLang's "
                                                   f"{ARCH} has exactly one draft layer"))
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    if ec.get("norm_before_fc") or cfg.get("norm_before_fc"):
        P.append(Problem(E.UNSUPPORTED_OPTION, f"{where}: norm_before_fc=true — SGLang's {ARCH} has no input_norm, it "
                                               f"would run a different network than the one trained"))
    fields = {f: cfg.get(f) or 0 for f in DIM_FIELDS}
    return {"q_lora": fields["q_lora_rank"], "kv_lora": fields["kv_lora_rank"], "rope": fields["qk_rope_head_dim"],
            "nope": fields["qk_nope_head_dim"], "v_head": fields["v_head_dim"]}, P


def release_k(cfg: dict) -> int:
    """K exactly as the release computes it (num_aux_hidden_states is not read by this class)."""
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if isinstance(ids, list) and ids else 3


def layer_shapes(spec) -> dict[str, tuple[int, ...]]:
    H, n = spec.hidden, spec.n_heads
    a, m, L = ATTN, "layers.0.mlp.", "layers.0."
    return {Q_HALF: (spec.q_lora, 2 * H), a + "q_a_layernorm.weight": (spec.q_lora,),
            a + "q_b_proj.weight": (n * (spec.nope + spec.rope), spec.q_lora),
            KV_HALF: (spec.kv_lora + spec.rope, 2 * H), a + "kv_a_layernorm.weight": (spec.kv_lora,),
            a + "kv_b_proj.weight": (n * (spec.nope + spec.v_head), spec.kv_lora), a + "o_proj.weight": (H, n * spec.v_head),
            m + "gate_proj.weight": (spec.inter, H), m + "up_proj.weight": (spec.inter, H),
            m + "down_proj.weight": (H, spec.inter), L + "input_layernorm.weight": (H,), L + "hidden_norm.weight": (H,),
            L + "post_attention_layernorm.weight": (H,)}


def _dims(spec) -> str:
    return (f"hidden {spec.hidden}, heads {spec.n_heads}, q_lora_rank {spec.q_lora}, kv_lora_rank {spec.kv_lora}, "
            f"qk_rope_head_dim {spec.rope}, qk_nope_head_dim {spec.nope}, v_head_dim {spec.v_head}")


def _implied(canon: str, shape: tuple, spec) -> str:
    """What the checkpoint tensor says the config should be (the usual cause: a config from another draft)."""
    if canon.endswith("kv_a_layernorm.weight") and len(shape) == 1:
        return f"; the checkpoint has kv_lora_rank={shape[0]}"
    if canon.endswith("q_a_layernorm.weight") and len(shape) == 1:
        return f"; the checkpoint has q_lora_rank={shape[0]}"
    if canon == KV_HALF and len(shape) == 2 and shape[0] > spec.kv_lora:
        return f"; with kv_lora_rank={spec.kv_lora} the checkpoint has qk_rope_head_dim={shape[0] - spec.kv_lora}"
    if canon == Q_HALF and len(shape) == 2:
        return f"; the checkpoint has q_lora_rank={shape[0]}"
    return ""


def tensor_problem(canon: str, shape: tuple, want: tuple, spec, where: str) -> Problem | None:
    """A precise problem for a wrong-shaped MLA attention tensor; None for tensors this module does not own."""
    if canon == FUSED:
        return None
    if canon in (Q_HALF, KV_HALF) and len(shape) == 2 and shape[1] == spec.hidden and want[1] == 2 * spec.hidden:
        return Problem(E.MLA_INPUT, f"{where}: {canon} is {list(shape)}: it takes 1 x hidden ({spec.hidden}), but the "
                                    f"EAGLE-3 MLA draft layer feeds it cat(embeds, target states) = 2 x hidden "
                                    f"({list(want)}). This is a plain DeepSeek attention layer (an MTP/NextN layer?), "
                                    f"not an EAGLE-3 draft layer", key=canon)
    if canon.startswith(ATTN):
        return Problem(E.MLA_DIMS, f"{where}: {canon} is {list(shape)}, expected {list(want)} from the config's MLA "
                                   f"dims ({_dims(spec)}){_implied(canon, shape, spec)} — the config does not "
                                   f"describe these weights", key=canon)
    return None


def fused_key_problem(where: str) -> Problem:
    return Problem(E.UNEXPECTED_WEIGHT, f"{where}: {FUSED} is stored pre-fused; SGLang's {ARCH}.load_weights reads it "
                                        f"as a kv_a_proj_with_mqa half and drops it silently — convert it (python -m "
                                        f"sglang_eagle3_ext.convert SRC DST splits it into q_a_proj + kv_a_proj_with_mqa)",
                   key=FUSED)


def split_fused(tensor, spec):
    """(q_a_proj, kv_a_proj_with_mqa) from a pre-fused tensor (rows: q_lora, then kv_lora + rope)."""
    return tensor[: spec.q_lora].clone(), tensor[spec.q_lora:].clone()


def half_missing_problem(missing: str, present: str, where: str) -> Problem:
    return Problem(E.FUSED_HALF, f"{where}: {missing} missing while {present} is there — SGLang fuses the two into "
                                 f"fused_qkv_a_proj_with_mqa only when both arrive, so the whole q/kv down-projection "
                                 f"would stay uninitialised (silently, in SGLang alone)", key=missing)


def fused_halves(present: set[str]) -> tuple[str, str] | None:
    """(missing, present) when exactly one fused half is there."""
    if (Q_HALF in present) != (KV_HALF in present):
        return (KV_HALF, Q_HALF) if Q_HALF in present else (Q_HALF, KV_HALF)
    return None
