"""The supported SGLang range (declared once) and capability flags of the installed release.

Flags are read from the installed SGLang's files (source probes, no import of SGLang), so a
backported or patched build gets the flags of what it actually contains; the version number
only decides whether we agree to run at all.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
from pathlib import Path

from . import envs

# The supported range, declared here only: patches/make_patches.py and
# the locks in constraints/ are checked against it (tests/unit/test_versions.py).
SUPPORTED_MIN = "0.5.10"  # first supported release (its pre-releases are not)
SUPPORTED_MAX = "0.5.23"  # last supported release, its post releases (0.5.23.post1) included
# Every supported release we test (patches/<release>/, the compat matrix) -> the transformers its wheel pins.
TESTED_RELEASES: dict[str, str] = {
    "0.5.10": "5.3.0",
    "0.5.14": "5.8.1",
    "0.5.16": "5.12.1",
    "0.5.18": "5.12.1",
    "0.5.20": "5.12.1",
    "0.5.22": "5.19.0",
    "0.5.23": "5.19.0",
}
# The release `pip install '.[sglang]'` installs and the GPU results (docs/results.md) are measured on.
RECOMMENDED = "0.5.16"
FORCE_ENV = envs.FORCE_VERSION


def _next_release(v: str) -> str:
    *head, last = v.split(".")
    return ".".join([*head, str(int(last) + 1)])


# PEP 440, the same at run time (in_range) and for pip: ">=MIN,<MAX+1" admits MAX's post releases and
# excludes MAX+1's pre-releases, exactly like the run-time check.
SPECIFIER = f">={SUPPORTED_MIN},<{_next_release(SUPPORTED_MAX)}"
REQUIREMENT = f"sglang{SPECIFIER}"


class UnsupportedSGLang(RuntimeError):
    pass


def parse(v: str) -> tuple[int, ...]:
    """The release number of a PEP 440 version ('0.5.16.post2', '0.5.16rc1', '0.5.16+cu128' -> (0, 5, 16));
    () when `v` is not a version. Capability tables compare these (a release's pre/post builds share
    its code); the supported range compares full versions (in_range)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v).release[:3]
    except InvalidVersion:
        return ()


def installed_version() -> str | None:
    import importlib.metadata  # ~20 ms: not paid by a process that imports the patch table and patches nothing

    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def in_range(version: str) -> bool:
    """`version` satisfies SPECIFIER (pre-releases inside the range count: they are installed already)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return SpecifierSet(SPECIFIER).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def check_supported(version: str | None = None) -> str:
    """Return the installed version or raise a one-line refusal naming the range."""
    version = version or installed_version()
    if version is None:
        raise UnsupportedSGLang(
            "sglang is not installed (pip install sglang; from a checkout: pip install '.[sglang]')"
        )
    if not in_range(version) and not envs.get(FORCE_ENV):
        raise UnsupportedSGLang(
            f"sglang {version} is outside the supported range {SUPPORTED_MIN}..{SUPPORTED_MAX}; "
            f"run `python -m sglang_eagle3_ext.compat` to see what moved, or set {FORCE_ENV}=1 to try anyway"
        )
    return version


@dataclasses.dataclass(frozen=True)
class Capabilities:
    version: str
    HAS_MIDLAYER: bool  # draft layer is `self.midlayer` (<=0.5.10) ...
    HAS_LAYERS_LIST: bool  # ... or `self.layers = ModuleList` (>=0.5.14)
    HAS_FC_NORM: bool  # per-aux RMSNorm before fc (`fc_norm`)
    HAS_INPUT_NORM: bool  # `norm_before_fc` / `input_norm` (0.5.18+)
    HAS_NORM_OUTPUT: bool  # draft config `norm_output` honoured (0.5.14+)
    HAS_PLUGINS: bool  # entry-point group `sglang.srt.plugins`
    AUX_PACKED: bool  # aux states arrive as one [T, K*H] tensor, not a list
    CAPTURE_ALWAYS_PLUS_ONE: bool  # set_eagle3_layers_to_capture adds 1 to every id
    HAS_RUNTIME_CONTEXT: bool  # server args published via runtime_context.publish (0.5.22+), no global setter
    HAS_FORWARD_BATCH_RIDS: bool
    HAS_MLA_DRAFT: bool = False  # MLA EAGLE-3 draft class Eagle3DeepseekV2ForCausalLM (kimi_k25_eagle3.py, 0.5.14+)
    SPEC_V2_VERIFY_SCHEDULE_BATCH: bool = False  # EAGLEWorkerV2.verify(batch: ScheduleBatch) (0.5.14+): dump responses
    HAS_OUTPUT_STREAMER: bool = False  # SchedulerOutputStreamer.stream_output sees every ended request (0.5.14+)
    # HF index 0 (the embeddings) can be captured: the layer captures its input after prepare_attn (0.5.14+);
    # before, DeepseekV2Model's loop appends `hidden_states + residual` with residual None at layer 0
    CAPTURE_LAYER0: bool = False
    # the scheduler's SchedulerWeightUpdaterManager.update_weights_from_disk reaches the draft worker (0.5.14+):
    # where `swap` loads a new EAGLE-3 draft into the draft runners between batches
    DRAFT_SWAP: bool = False
    # `--speculative-adaptive` / `--speculative-adaptive-config JSON`: steps switched at runtime per batch-size band,
    # the config's integer-string keys each holding `candidate_steps` (0.5.14+)
    HAS_SPEC_ADAPTIVE: bool = False
    # DFlash (block-diffusion) drafts: the draft class DFlashDraftModel (models/dflash.py) and the DeepSeek
    # target's set_dflash_layers_to_capture (0.5.14+)
    HAS_DFLASH: bool = False
    # DFlashDraftModel bounds target_layer_ids by max(ids) + 1 when its config has no num_target_layers (0.5.18+);
    # before, by the draft's own num_hidden_layers: any id >= it is refused at start-up
    DFLASH_IDS_BOUND_BY_MAX: bool = False

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def sglang_root() -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _read(root: Path, rel: str) -> str:
    p = root / rel
    return p.read_text(errors="replace") if p.exists() else ""


def capabilities_from_source(root: Path, version: str) -> Capabilities:
    """Probe a SGLang source tree (installed package dir, or an unpacked wheel's `sglang/`)."""
    eagle = _read(root, "srt/models/llama_eagle3.py")
    ds = _read(root, "srt/models/deepseek_v2.py")
    fb = _read(root, "srt/model_executor/forward_batch_info.py")
    return Capabilities(
        version=version,
        HAS_MIDLAYER="self.midlayer" in eagle,
        HAS_LAYERS_LIST=bool(re.search(r"self\.layers\s*=\s*nn\.ModuleList", eagle)),
        HAS_FC_NORM="fc_norm" in eagle,
        HAS_INPUT_NORM="input_norm" in eagle or "norm_before_fc" in eagle,
        HAS_NORM_OUTPUT="norm_output" in eagle,
        HAS_PLUGINS=(root / "srt/plugins/__init__.py").exists(),
        AUX_PACKED="AuxHiddenStatePacker" in ds,
        CAPTURE_ALWAYS_PLUS_ONE=bool(
            re.search(r"layers_to_capture = \[val \+ 1 for val in layer_ids\]\n(?!\s*else)", ds)
        )
        and "layer_ids[0] == 1" not in ds,
        HAS_RUNTIME_CONTEXT="SpawnRanks" in _read(root, "srt/runtime_context.py"),
        HAS_FORWARD_BATCH_RIDS=bool(re.search(r"^\s+rids:", fb, re.M)),
        HAS_MLA_DRAFT="class Eagle3DeepseekV2ForCausalLM" in _read(root, "srt/models/kimi_k25_eagle3.py"),
        SPEC_V2_VERIFY_SCHEDULE_BATCH=bool(
            re.search(r"def verify\(self, batch: ScheduleBatch\b", _read(root, "srt/speculative/eagle_worker_v2.py"))
        ),
        HAS_OUTPUT_STREAMER="class SchedulerOutputStreamer"
        in _read(root, "srt/managers/scheduler_components/output_streamer.py"),
        CAPTURE_LAYER0="captured_last_layer_outputs" in ds,
        DRAFT_SWAP=_draft_swap(_read(root, "srt/managers/scheduler_components/weight_updater.py")),
        HAS_SPEC_ADAPTIVE="speculative_adaptive_config" in _read(root, "srt/server_args.py")
        and "candidate_steps" in _read(root, "srt/speculative/adaptive_spec_params.py"),
        HAS_DFLASH="class DFlashDraftModel" in _read(root, "srt/models/dflash.py")
        and "def set_dflash_layers_to_capture" in ds,
        DFLASH_IDS_BOUND_BY_MAX="max(draft_config.target_layer_ids) + 1" in _read(root, "srt/models/dflash.py"),
    )


def _draft_swap(updater: str) -> bool:
    """The scheduler hands weight updates from disk to one manager that also holds the draft worker."""
    return (
        "class SchedulerWeightUpdaterManager" in updater
        and "def update_weights_from_disk" in updater
        and "draft_worker" in updater
    )


# For offline tools with no SGLang installed (`check --sglang-version X`): the first release in which each
# flag holds, as read from the wheels with capabilities_from_source (a test compares it to the installed one).
_FLAG_SINCE = {
    "HAS_LAYERS_LIST": "0.5.14",
    "HAS_FC_NORM": "0.5.14",
    "HAS_INPUT_NORM": "0.5.18",
    "HAS_NORM_OUTPUT": "0.5.14",
    "HAS_PLUGINS": "0.5.14",
    "AUX_PACKED": "0.5.18",
    "HAS_RUNTIME_CONTEXT": "0.5.22",
    "HAS_FORWARD_BATCH_RIDS": "0.5.10",
    "HAS_MLA_DRAFT": "0.5.14",
    "SPEC_V2_VERIFY_SCHEDULE_BATCH": "0.5.14",
    "HAS_OUTPUT_STREAMER": "0.5.14",
    "CAPTURE_LAYER0": "0.5.14",
    "DRAFT_SWAP": "0.5.14",
    "HAS_SPEC_ADAPTIVE": "0.5.14",
    "HAS_DFLASH": "0.5.14",
    "DFLASH_IDS_BOUND_BY_MAX": "0.5.18",
}
_FLAG_UNTIL = {"HAS_MIDLAYER": "0.5.14", "CAPTURE_ALWAYS_PLUS_ONE": "0.5.14"}  # true before this release


def capabilities_for_version(version: str) -> Capabilities:
    """Flags of a named release without its source (the table above)."""
    v = parse(version)
    flags = {k: v >= parse(since) for k, since in _FLAG_SINCE.items()}
    flags.update({k: v < parse(until) for k, until in _FLAG_UNTIL.items()})
    return Capabilities(version=version, **flags)


def layer0_refusal(caps: Capabilities | None = None) -> str | None:
    """Why HF index 0 (the embeddings) cannot be captured on this release (installed when `caps` is None);
    None where it can. Said by the dump's layer check, the capture-layer patch and `convert`."""
    caps = caps if caps is not None else capabilities()
    if caps.CAPTURE_LAYER0:
        return None
    return (
        f"HF index 0 (the embeddings) cannot be captured on SGLang {caps.version}: its DeepseekV2Model adds the "
        f"residual, still None before layer 0, and the scheduler dies; use indices >= 1 (e.g. 2,n//2,n-3), or "
        f"SGLang {_FLAG_SINCE['CAPTURE_LAYER0']}+ for index 0"
    )


def swap_refusal(caps: Capabilities) -> str | None:
    """Why a server on `caps`'s release cannot take a new draft while it runs (`swap`); None where it can."""
    if caps.DRAFT_SWAP:
        return None
    return (
        f"SGLang {caps.version} has no draft weight update between batches (its scheduler's weight updater does "
        f"not reach the draft worker): swapping the draft of a running server needs SGLang "
        f"{_FLAG_SINCE['DRAFT_SWAP']}+; on this release restart the server with the new draft"
    )


@functools.lru_cache(maxsize=1)
def capabilities() -> Capabilities:
    """Flags of the installed SGLang (cached; cheap: reads a few source files)."""
    version = check_supported()
    root = sglang_root()
    assert root is not None
    return capabilities_from_source(root, version)
