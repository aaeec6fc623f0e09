"""Patches of sglang.srt.models.kimi_k25_eagle3 (0.5.14+, capability HAS_MLA_DRAFT): the MLA EAGLE-3 draft
class `Eagle3DeepseekV2ForCausalLM` that serves Kimi-K2.5/K2.6's published drafts. Same strict loading and
fc width guard as the Llama draft class (see llama_eagle3.py for why the built-in class is patched in place);
the MLA-specific rules live in draft/arch/mla/.
"""

from __future__ import annotations

# The same two wrappers as the Llama draft class: strict_load picks the MLA rules from the model's class.
from .llama_eagle3 import fc_width_guard, strict_load_weights

__all__ = ["fc_width_guard", "strict_load_weights"]
