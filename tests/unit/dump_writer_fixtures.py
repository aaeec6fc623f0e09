"""Shared by the writer tests (thread and process writers): a tiny sample shape and its dump metadata."""
import pytest

H, K = 8, 3


@pytest.fixture(autouse=True)
def _short_samples_allowed(monkeypatch):
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS", "1")


def _meta():
    return {"layer_indices_hf": [1, 2, 3], "hidden_size": H, "num_hidden_layers": 4,
            "architecture": "DeepseekV3ForCausalLM", "final": "both", "dtype": "float32"}
