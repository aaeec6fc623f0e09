"""Every patch this package makes, in one table.

name:     "feature.what", unique; the `patches/` diffs name it (`static_patch.patched(name)`).
target:   "module:Class.attr" in SGLang.
hook:     the wrapper's function name (wrapt signature); it lives in the hook module of the target's SGLang module,
          in_server/hooks/<its last part>.py (one per SGLang module patched), so `wrapper` is derived, never spelt.
feature:  which switch turns it on (FEATURES, see `features_from_env`);  requires: a `versions.Capabilities` flag or None.
params:   the target's parameters the wrapper reads by name (patching.bind / arg); `compat` checks each release has them.

`register` refuses a row that does not conform, in one line naming the patch and the member at fault. It reads the
hook modules' source rather than importing them (they sit above this table), so nothing is imported here.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from pathlib import Path

from . import envs
from .versions import Capabilities

HOOKS = "sglang_eagle3_ext.in_server.hooks"
_HOOKS_DIR = Path(__file__).resolve().parent / "in_server" / "hooks"
FEATURES = ("draft", "dump")  # the switches of `features_from_env`
_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_DOTTED = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
_TARGET = re.compile(rf"{_DOTTED}:[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")  # a class member: compat finds no module-level one


@dataclasses.dataclass(frozen=True)
class PatchSpec:
    name: str
    target: str
    hook: str
    does: str
    feature: str
    requires: str | None = None
    params: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]

    @property
    def hook_module(self) -> str:
        return f"{HOOKS}.{self.module.rpartition('.')[2]}"

    @property
    def wrapper(self) -> str:
        """The "module:function" of the wrapper (patching.import_string)."""
        return f"{self.hook_module}:{self.hook}"


class PatchRefused(TypeError):
    """A row that does not conform: raised by `register`, one line naming the patch and the member at fault."""


@functools.cache
def _top_level_names(stem: str) -> frozenset[str] | None:
    """The names in_server/hooks/<stem>.py defines or imports at its top, read from its source; None: no such file."""
    path = _HOOKS_DIR / f"{stem}.py"
    if not stem.isidentifier() or not path.is_file():
        return None
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(names)


def _hook_problem(spec: PatchSpec) -> str | None:
    if not isinstance(spec.hook, str) or not spec.hook.isidentifier():
        return f"hook {spec.hook!r} is no function name (its module is derived from the target)"
    stem = spec.hook_module.rpartition(".")[2]
    names = _top_level_names(stem)
    if names is None:
        return f"hook {spec.hook!r}: no in_server/hooks/{stem}.py (the hook module of {spec.module})"
    if spec.hook not in names:
        return f"hook {spec.hook!r}: in_server/hooks/{stem}.py defines no {spec.hook}"
    return None


def problems(spec: PatchSpec, earlier=()) -> list[str]:
    """What keeps `spec` from being a row, given the rows before it ([] when it conforms); imports nothing."""
    if not isinstance(spec.name, str) or not _NAME.fullmatch(spec.name):
        return [f'name {spec.name!r} is not "feature.what" in lower case']
    if not isinstance(spec.target, str) or not _TARGET.fullmatch(spec.target):
        return [f'target {spec.target!r} is not "module:Class.attr"']
    out = [] if (bad := _hook_problem(spec)) is None else [bad]
    if spec.name in {e.name for e in earlier}:
        out.append("name: taken by an earlier row")
    shared = {e.module for e in earlier if e.hook_module == spec.hook_module and e.module != spec.module}
    if shared:
        out.append(f"target: {spec.hook_module} already hooks {shared.pop()} (one hook module per SGLang module)")
    if spec.feature not in FEATURES:
        out.append(f"feature {spec.feature!r} is none of {', '.join(FEATURES)}")
    if spec.requires is not None and spec.requires not in {f.name for f in dataclasses.fields(Capabilities)}:
        out.append(f"requires {spec.requires!r} is no capability flag of versions.Capabilities")
    if not isinstance(spec.does, str) or not spec.does.strip():
        out.append("does: empty")
    if not isinstance(spec.params, tuple) or not all(isinstance(p, str) and p.isidentifier() for p in spec.params):
        out.append(f"params {spec.params!r} is no tuple of parameter names")
    return out


def register(*specs: PatchSpec) -> tuple[PatchSpec, ...]:
    """The rows, once each conforms (PatchRefused otherwise)."""
    for i, spec in enumerate(specs):
        bad = problems(spec, specs[:i])
        if bad:
            raise PatchRefused(f"patch {getattr(spec, 'name', spec)!r} does not conform: {'; '.join(bad)}")
    return specs


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

PATCHES: tuple[PatchSpec, ...] = register(
    PatchSpec(
        "draft.strict_load",
        f"{_EAGLE}:LlamaForCausalLMEagle3.load_weights",
        "strict_load_weights",
        "normalise key names for this release, load, then account for every tensor and check shapes/values",
        feature="draft",
        params=("weights",),
    ),
    PatchSpec(
        "draft.fc_width_guard",
        f"{_EAGLE}:LlamaModel.forward",
        "fc_width_guard",
        "refuse target-fed batches whose hidden width is not the fc input width (no silent fc bypass)",
        feature="draft",
        params=("forward_batch",),
    ),
    PatchSpec(
        "draft.mla_strict_load",
        f"{_MLA}:Eagle3DeepseekV2ForCausalLM.load_weights",
        "strict_load_weights",
        "MLA draft (Kimi-K2.5): normalise keys, load, account for every tensor and parameter, check shapes/values",
        feature="draft",
        requires="HAS_MLA_DRAFT",
        params=("weights",),
    ),
    PatchSpec(
        "draft.mla_fc_width_guard",
        f"{_MLA}:Eagle3MLAModel.forward",
        "fc_width_guard",
        "MLA draft: refuse target-fed batches whose hidden width is not the fc input width",
        feature="draft",
        requires="HAS_MLA_DRAFT",
        params=("forward_batch",),
    ),
    PatchSpec(
        "draft.dflash_strict_load",
        f"{_DFLASH}:DFlashDraftModel.load_weights",
        "strict_load_weights",
        "DFlash draft: load, then account for every tensor and parameter and check shapes, values and the "
        "dflash_config (block size, mask token, target layers)",
        feature="draft",
        requires="HAS_DFLASH",
        params=("weights",),
    ),
    PatchSpec(
        "draft.dflash_fc_width_guard",
        f"{_DFLASH}:DFlashDraftModel.project_target_hidden",
        "fc_width_guard",
        "DFlash draft: refuse target states whose width is not the fc input width, naming K and the target layers",
        feature="draft",
        requires="HAS_DFLASH",
        params=("target_hidden",),
    ),
    PatchSpec(
        "target.explicit_capture_layers",
        f"{_DS}:DeepseekV2ForCausalLM.set_eagle3_layers_to_capture",
        "explicit_capture_layers",
        "capture exactly the HF hidden_states indices recorded by the draft/dump, whatever the release's +1 rule",
        feature="draft",
        params=("layer_ids",),
    ),
    PatchSpec(
        "draft.swap",
        f"{_WU}:SchedulerWeightUpdaterManager.update_weights_from_disk",
        "swap_draft",
        "/update_weights_from_disk with our load_format: check a new EAGLE-3 draft, load it into the draft "
        "runners in place (every TP rank, between batches); any failure keeps the old draft",
        feature="draft",
        requires="DRAFT_SWAP",
        params=("recv_req",),
    ),
    PatchSpec(
        "draft.swap_keeps_model",
        f"{_TM}:TokenizerManager._update_model_path_info",
        "keep_model_path",
        "after a draft swap the served model keeps its name and path (SGLang would take the draft's)",
        feature="draft",
        requires="DRAFT_SWAP",
        params=("model_path", "load_format"),
    ),
    PatchSpec(
        "draft.swap_report",
        f"{_SCH}:Scheduler.get_internal_state",
        "report_draft",
        "/get_server_info says which draft is served, how it is built and which layers the target captures",
        feature="draft",
        requires="DRAFT_SWAP",
    ),
    PatchSpec(
        "dump.capture_switch",
        f"{_DS}:DeepseekV2ForCausalLM.__init__",
        "enable_dump_capture",
        "turn on aux-state capture at the configured dump layers on the target model",
        feature="dump",
    ),
    PatchSpec(
        "dump.multimodal_flags",
        f"{_FB}:ForwardBatch.init_new",
        "record_multimodal",
        "remember which requests of a batch carry images/audio/video before the embedding step clears it",
        feature="dump",
    ),
    PatchSpec(
        "dump.prefill_hook",
        f"{_LP}:LogitsProcessor.forward",
        "dump_prefill",
        "hand aux + final hidden states of pure EXTEND batches of the target to the dump writer",
        feature="dump",
        params=("hidden_states", "logits_metadata", "aux_hidden_states"),
    ),
    PatchSpec(
        "dump.serving_check",
        f"{_EW2}:EAGLEWorkerV2.__init__",
        "check_serving_dump",
        "dump while serving EAGLE-3: the target must capture exactly the dump's (= the draft's) layers, "
        "else a start-up error naming both",
        feature="dump",
        requires="SPEC_V2_VERIFY_SCHEDULE_BATCH",
    ),
    PatchSpec(
        "dump.verify_hook",
        f"{_EW2}:EAGLEWorkerV2.verify",
        "dump_verify",
        "dump while serving EAGLE-3: copy the TARGET_VERIFY states of the accepted tokens + bonus to the writer",
        feature="dump",
        requires="SPEC_V2_VERIFY_SCHEDULE_BATCH",
        params=("batch",),
    ),
    PatchSpec(
        "dump.request_end",
        f"{_OS}:SchedulerOutputStreamer.stream_output",
        "dump_request_end",
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
