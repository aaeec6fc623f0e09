"""Shared by the writer tests (thread and process writers): a tiny sample shape and its dump metadata."""

from helpers import _short_samples_allowed  # noqa: F401 (autouse where imported)

H, K = 8, 3


def _meta():
    return {
        "layer_indices_hf": [1, 2, 3],
        "hidden_size": H,
        "num_hidden_layers": 4,
        "architecture": "DeepseekV3ForCausalLM",
        "final": "both",
        "dtype": "float32",
    }
