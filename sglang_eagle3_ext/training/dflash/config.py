"""What the DFlash route refuses before it builds anything and the draft it builds, shared with `train --dry-run`
(training/dflash/plan.py): its aux layers, its settings, its Qwen3 layer config. Imports nothing heavy.

The draft SGLang serves has no embedding and no head of its own (it uses the target's), so it trains the full
target vocabulary; its aux layers are HF hidden_states indices 1..n-1 (SGLang captures `target_layer_ids` + 1:
index 0 has no id, index n is never captured); its mask token is a token id of the target's vocabulary (the
first token of every block's noise, written into the draft's config)."""

from __future__ import annotations

from pathlib import Path

from ..report import TrainDraftError

BLOCK_SIZE = 16  # speculators' DFlash default and SGLang's when a draft names none
MAX_ANCHORS = 512  # speculators' default: blocks drawn per packed sequence
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def layer_ids_for(a, n_layers: int, data) -> tuple[list[int], str]:
    """The aux layers (--layer-ids, else --data's metadata, else SGLang's DFlash rule for --num-layers draft
    layers) and where they came from, refused unless distinct HF indices SGLang can feed a DFlash draft."""
    from ...draft.layers import dflash_default_layers
    from ..data import parse_layer_ids, read_layer_ids_from_metadata

    layer_ids, src = parse_layer_ids(a.layer_ids), "--layer-ids"
    if layer_ids is None and data is not None:
        layer_ids, src = read_layer_ids_from_metadata(Path(data))
    if layer_ids is None:
        try:
            layer_ids = dflash_default_layers(n_layers, a.num_layers)
        except ValueError as e:
            raise TrainDraftError(f"--num-layers {a.num_layers}: {e}; pass --layer-ids") from None
        src = f"SGLang's DFlash rule for {a.num_layers} draft layer(s)"
    if len(set(layer_ids)) != len(layer_ids) or min(layer_ids) < 1 or max(layer_ids) >= n_layers:
        raise TrainDraftError(
            f"layer ids {layer_ids} ({src}) must be distinct HF hidden_states indices in [1, {n_layers - 1}]: "
            f"SGLang feeds a DFlash draft the output of target layer i as HF index i + 1 (no index 0, and the "
            f"last layer's output, index {n_layers}, is never captured)"
        )
    return layer_ids, src


def check_settings(a, tcfg: dict) -> None:
    """The settings this route trains: the full vocabulary, a validation share, a block of two tokens or more,
    a mask token inside the vocabulary, fresh weights."""
    from ..speculators.draft_config import check_ratio

    vocab = int(tcfg["vocab_size"])
    if a.draft_vocab_size not in (None, vocab):
        raise TrainDraftError(
            "--draft-arch dflash trains the full target vocabulary (SGLang's DFlash draft uses the target's "
            "head): leave --draft-vocab-size out"
        )
    check_ratio(a)
    if a.block_size is not None and a.block_size < 2:
        raise TrainDraftError(f"--block-size {a.block_size}: a DFlash block holds the anchor and >= 1 drafted token")
    if a.mask_token_id is not None and not 0 <= a.mask_token_id < vocab:
        raise TrainDraftError(
            f"--mask-token-id {a.mask_token_id}: outside the target's vocabulary [0, {vocab - 1}] (SGLang cannot "
            f"grow the target's embedding for it)"
        )
    if a.init_from is not None:
        raise TrainDraftError("--draft-arch dflash trains fresh weights: leave --init-from out")


def needs_tokenizer(a, target) -> None:
    """Without --mask-token-id the mask token is the target tokenizer's (speculators' rule): refused, naming the
    flag, when the target folder has no tokenizer."""
    if a.mask_token_id is None and not any((Path(target) / f).is_file() for f in _TOKENIZER_FILES):
        raise TrainDraftError(
            f"--mask-token-id: {target} has no tokenizer to take DFlash's mask token from; give --mask-token-id N, "
            f"a token id of the target's vocabulary its text never holds (a reserved special token)"
        )


def draft_layer_config(tcfg: dict, a) -> dict:
    """The draft's decoder config: Qwen3 layers (q/k norms, as SGLang's DFlashDraftModel builds them) of the
    Llama route's sizes (training/speculators/draft_config.py: hidden = the target's, head_dim 128 or 64, plain
    RoPE of the target's theta), every layer full attention."""
    from ..speculators.draft_config import layer_config_of

    dcfg = layer_config_of(tcfg, a)
    for k in ("mlp_bias", "pad_token_id"):
        dcfg.pop(k, None)
    return dict(dcfg, model_type="qwen3", architectures=["Qwen3ForCausalLM"])


def block_size(a) -> int:
    return a.block_size or BLOCK_SIZE


def max_anchors(a) -> int:
    return a.max_anchors or MAX_ANCHORS


def identity(a, G: int, n_files: int, layer_ids: list[int], dcfg: dict, vocab: int, mask_token_id: int) -> dict:
    """What a resumed run must share with the checkpoint's (training/checkpoint.IDENTITY)."""
    from ..speculators.run import run_identity

    settings = {"block_size": block_size(a), "mask_token_id": mask_token_id}
    return run_identity(a.draft_arch, a, G, n_files, layer_ids, dcfg, vocab) | settings


def meta_model(dcfg: dict, tcfg: dict, layer_ids: list[int], a, mask_token_id: int, target):
    """speculators' DFlash draft for the layer config `dcfg` on the meta device (shapes, no storage): what the
    route's trainer builds, for --resume to compare a checkpoint with and for the plan's tests."""
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import Qwen3Config

    lc = Qwen3Config(**{k: v for k, v in dcfg.items() if k != "architectures"})
    lc._attn_implementation = "sdpa"
    verifier = VerifierConfig(
        name_or_path=str(target), architectures=list(tcfg.get("architectures") or ["DeepseekV3ForCausalLM"])
    )
    cfg = DFlashSpeculatorConfig(
        transformer_layer_config=lc,
        draft_vocab_size=int(tcfg["vocab_size"]),
        block_size=block_size(a),
        aux_hidden_state_layer_ids=list(layer_ids),
        mask_token_id=mask_token_id,
        speculators_config=SpeculatorsConfig(
            algorithm="dflash",
            default_proposal_method="greedy",
            verifier=verifier,
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=block_size(a) - 1)],
        ),
    )
    with torch.device("meta"):
        return DFlashDraftModel(config=cfg)
