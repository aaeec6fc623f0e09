"""The Llama draft's decoder config, written for speculators (``--draft-config``) instead of the one it would
synthesize from the verifier: that one copies DeepSeek's MoE/YaRN settings and makes every layer
sliding-window (2048), which SGLang's Llama EAGLE-3 draft does not have.

Ours: Llama, hidden = target hidden, 1 layer, full attention, head_dim 128 (64 if it does not divide), plain
RoPE with the target's ``rope_theta``, ``max_position_embeddings`` = max(target's, 8192) (a 2048 clamp is a
known acceptance collapse). The draft options that SGLang lacks or only some releases have are off:
``norm_before_residual`` (SGLang never has it), ``norm_before_fc``, ``fc_norm``, ``norm_output`` -- a classic
EAGLE-3 head every supported release serves.
"""

from __future__ import annotations

from ..options import refuse_block_settings
from ..report import TrainDraftError


def check_ratio(a) -> None:
    """speculators' trainer always holds a validation share out (its loader refuses a ratio of 1 with a traceback)."""
    if a.train_ratio >= 1:
        raise TrainDraftError(
            f"--train-ratio {a.train_ratio:g}: speculators' trainer always holds a validation share "
            f"out; use a ratio below 1 (e.g. 0.95)"
        )


def check_settings(a, target_cfg: dict, layer_ids: list[int] | None, src: str) -> int:
    """The settings the route refuses before training (the aux layers when known); returns the draft's
    vocabulary size."""
    vocab, n = int(target_cfg["vocab_size"]), int(target_cfg["num_hidden_layers"])
    dvs = a.draft_vocab_size
    if dvs is not None and (dvs <= 0 or dvs > vocab):
        raise TrainDraftError(f"--draft-vocab-size {dvs} must be in [1, {vocab}]")
    check_ratio(a)
    refuse_block_settings(a, a.draft_arch)
    if layer_ids is not None and (len(set(layer_ids)) != len(layer_ids) or min(layer_ids) < 0 or max(layer_ids) > n):
        raise TrainDraftError(f"layer ids {layer_ids} ({src}) must be distinct HF hidden_states indices in [0, {n}]")
    return dvs or vocab


def draft_layer_config(
    target_cfg: dict,
    *,
    num_layers: int = 1,
    intermediate_size: int | None = None,
    head_dim: int | None = None,
    num_kv_heads: int | None = None,
    max_position_embeddings: int | None = None,
) -> dict:
    """A plain Llama decoder config for the draft (see the module docstring for the choices)."""
    hidden = int(target_cfg["hidden_size"])
    if head_dim is None:
        head_dim = next((d for d in (128, 64) if hidden % d == 0), None)
        if head_dim is None:
            heads = int(target_cfg.get("num_attention_heads") or 1)
            head_dim = hidden // heads
    if hidden % head_dim:
        raise TrainDraftError(f"head_dim {head_dim} does not divide hidden_size {hidden}")
    heads = hidden // head_dim
    kv = num_kv_heads or heads
    if heads % kv:
        raise TrainDraftError(f"num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    inter = intermediate_size or int(target_cfg.get("intermediate_size") or 3 * hidden)
    rope_theta = float(
        target_cfg.get("rope_theta") or (target_cfg.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    )
    mpe = max_position_embeddings or max(int(target_cfg.get("max_position_embeddings") or 0), 8192)
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": int(target_cfg["vocab_size"]),
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": mpe,
        "initializer_range": float(target_cfg.get("initializer_range") or 0.02),
        "rms_norm_eps": float(target_cfg.get("rms_norm_eps") or 1e-6),
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "layer_types": ["full_attention"] * num_layers,
        "pad_token_id": None,
    }


def layer_config_of(target_cfg: dict, a) -> dict:
    """draft_layer_config of a run's --num-layers, --intermediate-size, --head-dim and --max-position-embeddings;
    a size that does not fit the target's is refused naming the target (its config.json holds the hidden size)."""
    try:
        return draft_layer_config(
            target_cfg,
            num_layers=a.num_layers,
            intermediate_size=a.intermediate_size,
            head_dim=a.head_dim,
            max_position_embeddings=a.max_position_embeddings,
        )
    except TrainDraftError as e:
        fix = "give --head-dim that divides it" if a.head_dim is None else "give another --head-dim"
        raise TrainDraftError(f"--target {a.target}: its config.json: {e}; {fix}") from None


def meta_model(dcfg: dict, target_cfg: dict, layer_ids: list[int], draft_vocab_size: int, ttt_steps: int, target):
    """speculators' draft for the layer config `dcfg`, built on the meta device (shapes, no storage): what the
    route's trainer builds, for --resume to compare a checkpoint with before loading it."""
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    lc = LlamaConfig(**dcfg)
    lc._attn_implementation = "sdpa"
    verifier = VerifierConfig(
        name_or_path=str(target), architectures=list(target_cfg.get("architectures") or ["DeepseekV3ForCausalLM"])
    )
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=lc,
        draft_vocab_size=draft_vocab_size,
        norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=list(layer_ids),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            default_proposal_method="greedy",
            verifier=verifier,
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=ttt_steps)],
        ),
    )
    with torch.device("meta"):
        return Eagle3DraftModel(config=cfg)
