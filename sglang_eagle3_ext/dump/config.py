"""Dump configuration: the dump's environment variables (declared, with their parse rules and preset
keys, in ../envs.py) turned into one DumpConfig, plus validation that turns a bad setting into one
clear message.

Layer indices use transformers' `output_hidden_states` convention: index i is the residual stream
*entering* decoder layer i (= output of layer i-1; 0 = embeddings). SGLang's DeepseekV2Model loop
index i captures exactly that, so `layers_to_capture = hf_indices` with no +1 anywhere; the default
layers are ../draft/layers.py's, the ones a draft trained on the dump is served with.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os

from .. import envs
from ..boundary import BadInput
from ..draft.layers import default_layers
from ..env_rules import DraftLayers

ENV_LAYERS = envs.DUMP_LAYERS  # "2,30,58": HF hidden_states indices; "dflash:5": a draft layout's own
ENV_FINAL = envs.DUMP_FINAL  # prenorm | postnorm | both
ENV_MAX_PENDING_MB = envs.DUMP_MAX_PENDING_MB  # host memory for in-flight samples
ENV_IO_THREADS = envs.DUMP_IO_THREADS
ENV_ENCODING = envs.DUMP_ENCODING  # bf16 (native, as captured) | fp8 (e4m3, row-wise scales)
ENV_COPY_STREAM = envs.DUMP_COPY_STREAM  # 1 (default): device->host copies on a side stream
ENV_DISCARD = envs.DUMP_DISCARD  # 1: benchmarking aid, capture + stitch, write nothing
ENV_WRITER = envs.DUMP_WRITER  # thread (default) | process: where the file io runs
ENV_MIN_TOKENS = envs.DUMP_MIN_TOKENS
ENV_SAMPLE_RATE = envs.DUMP_SAMPLE_RATE  # fraction of requests dumped (a hash of the sample id)
WRITERS = envs.VARS[ENV_WRITER].choices

ALL_ENV = tuple(v.name for v in envs.VARS.values() if v.section == "dump")

NODUMP_RID_PREFIX = "nodump-"  # requests whose rid starts with this are served, never dumped
# Prompts shorter than this are served, never dumped: SGLang's own start-up warm-up request (3 tokens,
# random rid) must not land in training data, and such short samples teach a draft nothing.
MIN_TOKENS_DEFAULT = envs.VARS[ENV_MIN_TOKENS].default


def _get(name: str, env=None):
    """The registry's parsed value, its error as a DumpConfigError (one message, naming the variable)."""
    try:
        return envs.get(name, env)
    except envs.EnvError as e:
        raise DumpConfigError(str(e)) from None


def min_sample_tokens(env=None) -> int:
    return _get(ENV_MIN_TOKENS, env)


FINAL_MODES = envs.VARS[ENV_FINAL].choices
ENCODINGS = envs.VARS[ENV_ENCODING].choices  # see encoding.py; one encoding per dump dir
CONVENTION = (
    "hf_output_hidden_states: index i = input of decoder layer i = output of layer i-1 "
    "(0 = embeddings); final states are stored separately"
)

# Files in a dump directory.
META_FILE = "dump_meta.json"
NORM_FILE = "final_norm.safetensors"
# `dump run --generate` records here which tokens the target generated: {"id", "prompt_len", "len"} per line.
# Exports use it as the loss mask (train on the target's own outputs, not on the prompts).
GENERATED_FILE = "generated.jsonl"
MANIFEST_DIR = "manifests"
SAMPLES_DIR = "samples"


class DumpConfigError(ValueError):
    pass


def sampled(sample_id: str, rate: float) -> bool:
    """The request is in the sample: a hash of its id, so every rank and every re-run decides alike."""
    return rate >= 1.0 or _id_hash(sample_id) < rate * 2.0**64


@functools.lru_cache(maxsize=1 << 16)
def _id_hash(sample_id: str) -> int:
    # asked for every batch of a running request (and every verify step): hashed once per id
    return int.from_bytes(hashlib.sha1(sample_id.encode("utf-8", "surrogatepass")).digest()[:8], "big")


@dataclasses.dataclass(frozen=True)
class DumpConfig:
    dump_dir: str
    layers: tuple[int, ...] | DraftLayers | None  # None: default_layers(n); LAYOUT:N: the layout's, once n is known
    final: str = "prenorm"
    max_pending_bytes: int = 4 << 30
    io_threads: int = 8
    encoding: str = "bf16"
    min_tokens: int = dataclasses.field(default_factory=min_sample_tokens)  # read once, not per batch
    # D2H copies on their own CUDA stream overlap the next forward instead of queueing behind it on the
    # compute stream (a 2K-token prompt of a 7168-wide model is ~120 MB of states); 0 = compute stream
    copy_stream: bool = True
    # benchmarks/bench_dump.py: the forward pass's share of the dump cost, without the writer's file io
    discard: bool = False
    # process: the writer runs in a child process, off the scheduler's GIL (in_server/dump/writer/process.py)
    writer: str = "thread"
    # fraction of requests dumped: part of the config (not of one writer object) so that the capture, the
    # thread writer and the writer process's child all take the same decision (wanted)
    sample_rate: float = 1.0

    def __post_init__(self):
        if self.encoding not in ENCODINGS:
            raise DumpConfigError(f"{ENV_ENCODING}={self.encoding!r}: expected one of {ENCODINGS}")
        if not 0.0 <= self.sample_rate <= 1.0:
            raise DumpConfigError(f"{ENV_SAMPLE_RATE}={self.sample_rate!r}: expected a fraction in 0..1")

    def wanted(self, sample_id: str) -> bool:
        """The request is in the dump's sample (SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE)."""
        return sampled(sample_id, self.sample_rate)

    @property
    def want_prenorm(self) -> bool:
        return self.final in ("prenorm", "both")

    @property
    def want_postnorm(self) -> bool:
        return self.final in ("postnorm", "both")

    def resolve_layers(self, num_layers: int, layer0_refusal: str | None = None, release=None) -> list[int]:
        """Validated HF indices for a model of `num_layers` decoder layers; layer0_refusal: why the release
        cannot capture index 0 (versions.layer0_refusal), None where it can; release: a function returning the
        release's versions.Capabilities, asked when the layers are a draft layout's (LAYOUT:N)."""
        if isinstance(self.layers, DraftLayers):
            layers = draft_layers(self.layers, num_layers, release() if release is not None else None)
        else:
            layers = list(self.layers) if self.layers is not None else default_layers(num_layers)
        if layer0_refusal and 0 in layers:
            raise DumpConfigError(f"{ENV_LAYERS}={','.join(map(str, layers))}: {layer0_refusal}")
        for i in layers:
            if i == num_layers:
                raise DumpConfigError(
                    f"{ENV_LAYERS}: index {i} is the final hidden state (after the last of {num_layers} layers); "
                    f"it is always dumped separately ({ENV_FINAL}); aux indices must be 0..{num_layers - 1}"
                )
            if not 0 <= i < num_layers:
                raise DumpConfigError(
                    f"{ENV_LAYERS}: index {i} out of range 0..{num_layers - 1} "
                    f"for a model with {num_layers} decoder layers"
                )
        if len(set(layers)) != len(layers) or layers != sorted(layers):
            raise DumpConfigError(f"{ENV_LAYERS}: indices must be strictly increasing, got {layers}")
        return layers


def draft_layers(spec: DraftLayers, num_layers: int, caps=None) -> list[int]:
    """The HF indices a fresh draft of `spec`'s layout with its layer count reads for a target of `num_layers`
    (the layout's default_aux_layers); DumpConfigError naming the variable when the layout is unknown or has no
    such layers (`caps`: the release, which may not serve the layout)."""
    from ..draft import arch as layouts

    try:
        mod = layouts.get(spec.layout)
    except BadInput:
        raise DumpConfigError(
            f"{ENV_LAYERS}={spec}: {spec.layout!r} is not a draft layout; expected one of {', '.join(layouts.names())}"
        ) from None
    try:
        return list(mod.default_aux_layers(num_layers, spec.num_layers, caps))
    except ValueError as e:
        raise DumpConfigError(f"{ENV_LAYERS}={spec}: {e}") from None


def layers_shown(layers) -> str:
    """The variable's text of a DumpConfig's layers (HF indices or LAYOUT:N)."""
    return str(layers) if isinstance(layers, DraftLayers) else ",".join(map(str, layers))


def parse_layers(text: str) -> tuple[int, ...] | DraftLayers | None:
    """The variable's text -> HF indices or LAYOUT:N (envs.parse_layers: the one rule), a DumpConfigError naming
    it."""
    try:
        return envs.parse_layers(text, ENV_LAYERS)
    except envs.EnvError as e:
        raise DumpConfigError(str(e)) from None


def layers_text(value, where: str = "dump_layers") -> str:
    """A preset's dump_layers (a YAML list of integers, or the same text as the variable) -> the variable's
    text. Floats ([1.9, 2.9] must not become 1,2), booleans and strings inside a list are refused."""
    if isinstance(value, (list, tuple)):
        bad = [x for x in value if type(x) is not int or x < 0]
        if bad or not value:
            raise DumpConfigError(
                f"{where}: {bad[0]!r} is not a layer index; expected a list of non-negative integers, e.g. [2, 30, 58]"
                if bad
                else f"{where}: empty list"
            )
        return ",".join(str(x) for x in value)
    if isinstance(value, str):
        try:
            layers = parse_layers(value)
        except DumpConfigError as e:
            raise DumpConfigError(f"{where}: {e}") from None
        if layers is None:
            raise DumpConfigError(f"{where}: empty")
        if isinstance(layers, DraftLayers):
            from ..draft import arch as layouts

            if layers.layout not in layouts.names():
                raise DumpConfigError(
                    f"{where}: {layers.layout!r} is not a draft layout; expected one of {', '.join(layouts.names())}"
                )
        return layers_shown(layers)
    raise DumpConfigError(
        f"{where}: {value!r} is not a list of layer indices; expected e.g. [2, 30, 58], or LAYOUT:N (dflash:5)"
    )


def host_memory_bytes() -> int | None:
    """Physical memory, or the cgroup (v2) limit of this container when lower; None when unknown."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            lim = fh.read().strip()
        if lim.isdigit() and (mem is None or int(lim) < mem):
            mem = int(lim)
    except OSError:
        pass
    return mem


def pending_budget_bytes(env=None, memory: int | None = -1) -> int:
    """The host-memory budget of in-flight samples. Set above this machine's memory it is an error naming the
    variable (it would be pinned at start-up); the default is capped at a quarter of a small machine's."""
    mb = _get(ENV_MAX_PENDING_MB, env)
    mem = host_memory_bytes() if memory == -1 else memory
    if mem and mb << 20 > mem:
        if envs.is_set(ENV_MAX_PENDING_MB, env):
            raise DumpConfigError(
                f"{ENV_MAX_PENDING_MB}={mb}: more than this machine's memory ({mem >> 20} MB); "
                f"set it well below that, e.g. {max(1, mem >> 22)}"
            )
        mb = max(1, mem >> 22)
    return mb << 20


def from_env(env=None) -> DumpConfig | None:
    """The dump config, None when dumping is off; DumpConfigError on a bad value (directory checks are
    the writer's, at start-up)."""
    if not envs.is_set(envs.DUMP_DIR, env):
        return None
    return DumpConfig(
        dump_dir=os.path.abspath(_get(envs.DUMP_DIR, env)),
        layers=_get(ENV_LAYERS, env),
        final=_get(ENV_FINAL, env),
        max_pending_bytes=pending_budget_bytes(env),
        io_threads=_get(ENV_IO_THREADS, env),
        encoding=_get(ENV_ENCODING, env),
        min_tokens=min_sample_tokens(env),
        copy_stream=_get(ENV_COPY_STREAM, env),
        discard=_get(ENV_DISCARD, env),
        writer=_get(ENV_WRITER, env),
        sample_rate=_sample_rate(env),
    )


def _sample_rate(env=None) -> float:
    rate = _get(ENV_SAMPLE_RATE, env)
    return 1.0 if rate is None else float(rate)
