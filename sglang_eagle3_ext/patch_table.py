"""Every patch this package makes, in one table.

target:   "module:Qualified.attr" in SGLang;  wrapper: "module:function" here (wrapt signature).
feature:  which switch turns it on (see `features_from_env`);  requires: a capability flag or None.
params:   the target's parameters the wrapper reads by name (patching.bind / arg); `compat` checks each release has them.
"""

from __future__ import annotations

import dataclasses

from . import envs


@dataclasses.dataclass(frozen=True)
class PatchSpec:
    name: str
    target: str
    wrapper: str
    does: str
    feature: str
    requires: str | None = None
    params: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]


_EAGLE = "sglang.srt.models.llama_eagle3"
_MLA = "sglang.srt.models.kimi_k25_eagle3"
_DFLASH = "sglang.srt.models.dflash"
_DS = "sglang.srt.models.deepseek_v2"
_LP = "sglang.srt.layers.logits_processor"
_EW2 = "sglang.srt.speculative.eagle_worker_v2"
_OS = "sglang.srt.managers.scheduler_components.output_streamer"
_FB = "sglang.srt.model_executor.forward_batch_info"
_WU = "sglang.srt.managers.scheduler_components.weight_updater"
_TM = "sglang.srt.managers.tokenizer_manager"
_SCH = "sglang.srt.managers.scheduler"
_T = "sglang_eagle3_ext.in_server.hooks"

PATCHES: tuple[PatchSpec, ...] = (
    PatchSpec(
        "draft.strict_load",
        f"{_EAGLE}:LlamaForCausalLMEagle3.load_weights",
        f"{_T}.llama_eagle3:strict_load_weights",
        "normalise key names for this release, load, then account for every tensor and check shapes/values",
        feature="draft",
        params=("weights",),
    ),
    PatchSpec(
        "draft.fc_width_guard",
        f"{_EAGLE}:LlamaModel.forward",
        f"{_T}.llama_eagle3:fc_width_guard",
        "refuse target-fed batches whose hidden width is not the fc input width (no silent fc bypass)",
        feature="draft",
        params=("forward_batch",),
    ),
    PatchSpec(
        "draft.mla_strict_load",
        f"{_MLA}:Eagle3DeepseekV2ForCausalLM.load_weights",
        f"{_T}.kimi_k25_eagle3:strict_load_weights",
        "MLA draft (Kimi-K2.5): normalise keys, load, account for every tensor and parameter, check shapes/values",
        feature="draft",
        requires="HAS_MLA_DRAFT",
        params=("weights",),
    ),
    PatchSpec(
        "draft.mla_fc_width_guard",
        f"{_MLA}:Eagle3MLAModel.forward",
        f"{_T}.kimi_k25_eagle3:fc_width_guard",
        "MLA draft: refuse target-fed batches whose hidden width is not the fc input width",
        feature="draft",
        requires="HAS_MLA_DRAFT",
        params=("forward_batch",),
    ),
    PatchSpec(
        "draft.dflash_strict_load",
        f"{_DFLASH}:DFlashDraftModel.load_weights",
        f"{_T}.dflash:strict_load_weights",
        "DFlash draft: load, then account for every tensor and parameter and check shapes, values and the "
        "dflash_config (block size, mask token, target layers)",
        feature="draft",
        requires="HAS_DFLASH",
        params=("weights",),
    ),
    PatchSpec(
        "draft.dflash_fc_width_guard",
        f"{_DFLASH}:DFlashDraftModel.project_target_hidden",
        f"{_T}.dflash:fc_width_guard",
        "DFlash draft: refuse target states whose width is not the fc input width, naming K and the target layers",
        feature="draft",
        requires="HAS_DFLASH",
        params=("target_hidden",),
    ),
    PatchSpec(
        "target.explicit_capture_layers",
        f"{_DS}:DeepseekV2ForCausalLM.set_eagle3_layers_to_capture",
        f"{_T}.deepseek_v2:explicit_capture_layers",
        "capture exactly the HF hidden_states indices recorded by the draft/dump, whatever the release's +1 rule",
        feature="draft",
        params=("layer_ids",),
    ),
    PatchSpec(
        "draft.swap",
        f"{_WU}:SchedulerWeightUpdaterManager.update_weights_from_disk",
        f"{_T}.weight_updater:swap_draft",
        "/update_weights_from_disk with our load_format: check a new EAGLE-3 draft, load it into the draft "
        "runners in place (every TP rank, between batches); any failure keeps the old draft",
        feature="draft",
        requires="DRAFT_SWAP",
        params=("recv_req",),
    ),
    PatchSpec(
        "draft.swap_keeps_model",
        f"{_TM}:TokenizerManager._update_model_path_info",
        f"{_T}.tokenizer_manager:keep_model_path",
        "after a draft swap the served model keeps its name and path (SGLang would take the draft's)",
        feature="draft",
        requires="DRAFT_SWAP",
        params=("model_path", "load_format"),
    ),
    PatchSpec(
        "draft.swap_report",
        f"{_SCH}:Scheduler.get_internal_state",
        f"{_T}.scheduler:report_draft",
        "/get_server_info says which draft is served, how it is built and which layers the target captures",
        feature="draft",
        requires="DRAFT_SWAP",
    ),
    PatchSpec(
        "dump.capture_switch",
        f"{_DS}:DeepseekV2ForCausalLM.__init__",
        f"{_T}.deepseek_v2:enable_dump_capture",
        "turn on aux-state capture at the configured dump layers on the target model",
        feature="dump",
    ),
    PatchSpec(
        "dump.multimodal_flags",
        f"{_FB}:ForwardBatch.init_new",
        f"{_T}.forward_batch_info:record_multimodal",
        "remember which requests of a batch carry images/audio/video before the embedding step clears it",
        feature="dump",
    ),
    PatchSpec(
        "dump.prefill_hook",
        f"{_LP}:LogitsProcessor.forward",
        f"{_T}.logits_processor:dump_prefill",
        "hand aux + final hidden states of pure EXTEND batches of the target to the dump writer",
        feature="dump",
        params=("hidden_states", "logits_metadata", "aux_hidden_states"),
    ),
    PatchSpec(
        "dump.serving_check",
        f"{_EW2}:EAGLEWorkerV2.__init__",
        f"{_T}.eagle_worker_v2:check_serving_dump",
        "dump while serving EAGLE-3: the target must capture exactly the dump's (= the draft's) layers, "
        "else a start-up error naming both",
        feature="dump",
        requires="SPEC_V2_VERIFY_SCHEDULE_BATCH",
    ),
    PatchSpec(
        "dump.verify_hook",
        f"{_EW2}:EAGLEWorkerV2.verify",
        f"{_T}.eagle_worker_v2:dump_verify",
        "dump while serving EAGLE-3: copy the TARGET_VERIFY states of the accepted tokens + bonus to the writer",
        feature="dump",
        requires="SPEC_V2_VERIFY_SCHEDULE_BATCH",
        params=("batch",),
    ),
    PatchSpec(
        "dump.request_end",
        f"{_OS}:SchedulerOutputStreamer.stream_output",
        f"{_T}.output_streamer:dump_request_end",
        "dump while serving EAGLE-3: a finished request is written as prompt+response, an aborted one forgotten",
        feature="dump",
        requires="HAS_OUTPUT_STREAMER",
        params=("reqs",),
    ),
)

ENV_ENABLE = envs.ENABLE  # patch every SGLang process (via the .pth)


def features_from_env(env=None) -> frozenset[str]:
    feats = {"draft"}
    if envs.is_set(envs.DUMP_DIR, env):  # set: the dump feature is on
        feats.add("dump")
    return frozenset(feats)
