"""What the MLA route decides before it builds anything, shared with `train --dry-run` (training/plan_models.py):
the draft's config.json from the target's, and the settings the route refuses. Imports the network module only for
its RoPE rule (torch, no model built)."""

from __future__ import annotations

from ...draft.arch import mla
from ...draft.keys import HF_INDICES_FIELD
from ..report import TrainDraftError

ARCH = mla.ARCH


def layer_ids_for(a, n_layers: int, data) -> tuple[list[int], str]:
    """The aux layers (--layer-ids, else --data's metadata, else draft/layers.py's default) and where they came from,
    refused unless distinct HF hidden_states indices of the target's layers."""
    from ..data import parse_layer_ids, read_layer_ids_from_metadata

    layer_ids, src = parse_layer_ids(a.layer_ids), "--layer-ids"
    if layer_ids is None and data is not None:
        layer_ids, src = read_layer_ids_from_metadata(data)
    if layer_ids is None:
        from ...draft.layers import default_layers

        layer_ids, src = default_layers(n_layers), "the default aux layers of draft/layers.py"
    if len(set(layer_ids)) != len(layer_ids) or min(layer_ids) < 0 or max(layer_ids) >= n_layers:
        raise TrainDraftError(
            f"layer ids {layer_ids} ({src}) must be distinct HF hidden_states indices in [0, {n_layers - 1}]"
        )
    return layer_ids, src


def check_settings(a, tcfg: dict) -> None:
    """The shape settings this route trains: one layer, the full target vocabulary."""
    if a.num_layers != 1:
        raise TrainDraftError("--draft-arch mla: SGLang's MLA EAGLE-3 draft has exactly one layer (--num-layers 1)")
    if a.draft_vocab_size not in (None, int(tcfg["vocab_size"])):
        raise TrainDraftError("--draft-arch mla trains the full target vocabulary (no --draft-vocab-size)")


def mla_draft_config(
    target_cfg: dict, layer_ids: list[int], intermediate_size: int | None = None, release_ids: list[int] | None = None
) -> dict:
    """The draft's config.json: the target's MLA geometry and RoPE, one layer, a dense MLP."""
    from ...draft.nets.mla import MLA_KEYS, rope_scaling_of

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
