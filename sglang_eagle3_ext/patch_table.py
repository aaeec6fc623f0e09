"""Every patch this package makes, in one table.

target:   "module:Qualified.attr" in SGLang;  wrapper: "module:function" here (wrapt signature).
feature:  which switch turns it on (see `features_from_env`);  requires: a capability flag or None.
"""
from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class PatchSpec:
    name: str
    target: str
    wrapper: str
    does: str
    feature: str
    requires: str | None = None

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]


_EAGLE = "sglang.srt.models.llama_eagle3"
_DS = "sglang.srt.models.deepseek_v2"
_LP = "sglang.srt.layers.logits_processor"
_T = "sglang_eagle3_ext.targets"

PATCHES: tuple[PatchSpec, ...] = (
    PatchSpec("draft.strict_load", f"{_EAGLE}:LlamaForCausalLMEagle3.load_weights",
              f"{_T}.llama_eagle3:strict_load_weights",
              "normalise key names for this release, load, then account for every tensor and check shapes/values",
              feature="draft"),
    PatchSpec("draft.fc_width_guard", f"{_EAGLE}:LlamaModel.forward",
              f"{_T}.llama_eagle3:fc_width_guard",
              "refuse target-fed batches whose hidden width is not the fc input width (no silent fc bypass)",
              feature="draft"),
    PatchSpec("target.explicit_capture_layers", f"{_DS}:DeepseekV2ForCausalLM.set_eagle3_layers_to_capture",
              f"{_T}.deepseek_v2:explicit_capture_layers",
              "capture exactly the HF hidden_states indices recorded by the draft/dump, whatever the release's +1 rule",
              feature="draft"),
    PatchSpec("dump.capture_switch", f"{_DS}:DeepseekV2ForCausalLM.__init__",
              f"{_T}.deepseek_v2:enable_dump_capture",
              "turn on aux-state capture at the configured dump layers on the target model",
              feature="dump"),
    PatchSpec("dump.prefill_hook", f"{_LP}:LogitsProcessor.forward",
              f"{_T}.logits_processor:dump_prefill",
              "hand aux + final hidden states of pure EXTEND batches of the target to the dump writer",
              feature="dump"),
)

ENV_ENABLE = "SGLANG_EAGLE3_EXT"           # 1: patch every SGLang process (via the .pth)
ENV_DUMP_DIR = "SGLANG_EAGLE3_EXT_DUMP_DIR"  # set: the dump feature is on


def features_from_env(env=os.environ) -> frozenset[str]:
    feats = {"draft"}
    if env.get(ENV_DUMP_DIR):
        feats.add("dump")
    return frozenset(feats)
