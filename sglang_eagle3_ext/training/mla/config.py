"""What the MLA route refuses before it builds anything, shared with `train --dry-run` (training/mla/plan.py):
its aux layers, its shape settings, samples too short to train on. Imports nothing heavy."""

from __future__ import annotations

from ..options import refuse_block_settings
from ..report import TrainDraftError


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
    refuse_block_settings(a, a.draft_arch)


def check_lengths(lengths: list[int], n_train: int, ttt_steps: int) -> None:
    """A training sample needs --ttt-steps + 2 tokens (shorter ones are skipped): refused when none has them."""
    if n_train and max(lengths[:n_train]) < ttt_steps + 2:
        raise TrainDraftError(
            f"--data: every training sample has fewer than {ttt_steps + 2} tokens (--ttt-steps {ttt_steps} + 2): "
            f"no training step would run; give longer samples or a lower --ttt-steps"
        )
