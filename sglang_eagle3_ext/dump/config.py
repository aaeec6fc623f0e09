"""Dump configuration: every environment variable name lives here (the launch wrapper maps its
preset keys to exactly these), plus validation that turns a bad setting into one clear message.

Layer indices use transformers' `output_hidden_states` convention: index i is the residual stream
*entering* decoder layer i (= output of layer i-1; 0 = embeddings). SGLang's DeepseekV2Model loop
index i captures exactly that, so `layers_to_capture = hf_indices` with no +1 anywhere.
"""
from __future__ import annotations

import dataclasses
import os

from ..patch_table import ENV_DUMP_DIR

ENV_DIR = ENV_DUMP_DIR                                   # set: dumping on (one definition: patch_table)
ENV_LAYERS = "SGLANG_EAGLE3_EXT_DUMP_LAYERS"             # "2,30,58": HF hidden_states indices
ENV_FORMAT = "SGLANG_EAGLE3_EXT_DUMP_FORMAT"             # "safetensors" (the only native format)
ENV_FINAL = "SGLANG_EAGLE3_EXT_DUMP_FINAL"               # prenorm | postnorm | both
ENV_MAX_PENDING_MB = "SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB"  # host memory for in-flight samples
ENV_IO_THREADS = "SGLANG_EAGLE3_EXT_DUMP_IO_THREADS"
ENV_ENCODING = "SGLANG_EAGLE3_EXT_DUMP_ENCODING"         # bf16 (native, as captured) | fp8 (e4m3, row-wise scales)
ENV_COPY_STREAM = "SGLANG_EAGLE3_EXT_DUMP_COPY_STREAM"   # 1 (default): device->host copies on a side stream
ENV_DISCARD = "SGLANG_EAGLE3_EXT_DUMP_DISCARD"           # 1: benchmarking aid, capture + stitch, write nothing
ENV_WRITER = "SGLANG_EAGLE3_EXT_DUMP_WRITER"             # thread (default) | process: where the file io runs
WRITERS = ("thread", "process")

ALL_ENV = (ENV_DIR, ENV_LAYERS, ENV_FORMAT, ENV_FINAL, ENV_MAX_PENDING_MB, ENV_IO_THREADS, ENV_ENCODING,
           ENV_COPY_STREAM, ENV_DISCARD, ENV_WRITER)

NODUMP_RID_PREFIX = "nodump-"      # requests whose rid starts with this are served, never dumped
ENV_MIN_TOKENS = "SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS"
# Prompts shorter than this are served, never dumped: SGLang's own start-up warm-up request (3 tokens,
# random rid) must not land in training data, and such short samples teach a draft nothing.
MIN_TOKENS_DEFAULT = 8


def min_sample_tokens(env=os.environ) -> int:
    try:
        n = int(env.get(ENV_MIN_TOKENS, "") or MIN_TOKENS_DEFAULT)
    except ValueError:
        raise DumpConfigError(f"{ENV_MIN_TOKENS}={env.get(ENV_MIN_TOKENS)!r}: expected an integer") from None
    if n < 1:
        raise DumpConfigError(f"{ENV_MIN_TOKENS} must be >= 1")
    return n
FORMATS = ("safetensors",)
FINAL_MODES = ("prenorm", "postnorm", "both")
ENCODINGS = ("bf16", "fp8")        # see encoding.py; one encoding per dump dir
CONVENTION = ("hf_output_hidden_states: index i = input of decoder layer i = output of layer i-1 "
              "(0 = embeddings); final states are stored separately")

# Files in a dump directory.
META_FILE = "dump_meta.json"
STATUS_FILE = "dump_status.json"
NORM_FILE = "final_norm.safetensors"
# `dump run --generate` records here which tokens the target generated: {"id", "prompt_len", "len"} per line.
# Exports use it as the loss mask (train on the target's own outputs, not on the prompts).
GENERATED_FILE = "generated.jsonl"
MANIFEST_DIR = "manifests"
SAMPLES_DIR = "samples"


class DumpConfigError(ValueError):
    pass


def default_layers(num_layers: int) -> list[int]:
    """[2, n//2, n-3] as HF indices ([2, 30, 58] for 61 layers): SGLang's own EAGLE-3 default
    (its loop indices equal HF indices) and speculators' default. Models too shallow for three distinct
    increasing ids (n < 8, e.g. test models) get [1, n//2, n-1] instead."""
    ids = [2, num_layers // 2, num_layers - 3]
    if not ids[0] < ids[1] < ids[2]:
        ids = [1, num_layers // 2, num_layers - 1]
    return ids


@dataclasses.dataclass(frozen=True)
class DumpConfig:
    dump_dir: str
    layers: tuple[int, ...] | None   # None: default_layers(n) once n is known
    fmt: str = "safetensors"
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
    # process: the writer runs in a child process, off the scheduler's GIL (writer_process.py)
    writer: str = "thread"

    def __post_init__(self):
        if self.encoding not in ENCODINGS:
            raise DumpConfigError(f"{ENV_ENCODING}={self.encoding!r}: expected one of {ENCODINGS}")

    @property
    def want_prenorm(self) -> bool:
        return self.final in ("prenorm", "both")

    @property
    def want_postnorm(self) -> bool:
        return self.final in ("postnorm", "both")

    def resolve_layers(self, num_layers: int) -> list[int]:
        """Validated HF indices for a model of `num_layers` decoder layers."""
        layers = list(self.layers) if self.layers is not None else default_layers(num_layers)
        for i in layers:
            if i == num_layers:
                raise DumpConfigError(
                    f"{ENV_LAYERS}: index {i} is the final hidden state (after the last of {num_layers} layers); "
                    f"it is always dumped separately ({ENV_FINAL}); aux indices must be 0..{num_layers - 1}")
            if not 0 <= i < num_layers:
                raise DumpConfigError(f"{ENV_LAYERS}: index {i} out of range 0..{num_layers - 1} "
                                      f"for a model with {num_layers} decoder layers")
        if len(set(layers)) != len(layers) or layers != sorted(layers):
            raise DumpConfigError(f"{ENV_LAYERS}: indices must be strictly increasing, got {layers}")
        return layers


def parse_layers(text: str) -> tuple[int, ...] | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        out = tuple(int(x) for x in text.replace(" ", "").split(",") if x != "")
    except ValueError:
        raise DumpConfigError(f"{ENV_LAYERS}={text!r}: expected comma-separated integers, e.g. 2,30,58") from None
    if not out:
        raise DumpConfigError(f"{ENV_LAYERS}={text!r}: no indices")
    return out


def _flag(env, name: str, default: str, choices: str) -> bool:
    """A 0/1 variable; anything else is a configuration error naming the choices."""
    v = (env.get(name, "") or default).strip()
    if v not in ("0", "1"):
        raise DumpConfigError(f"{name}={v!r}: expected {choices}")
    return v == "1"


def _choice(env, name: str, default: str, choices: tuple, hint: str) -> str:
    """One of `choices` (case and surrounding spaces ignored); anything else an error naming them."""
    v = (env.get(name, "") or default).strip().lower()
    if v not in choices:
        raise DumpConfigError(f"{name}={env.get(name)!r}: expected one of {choices} ({hint})")
    return v


def from_env(env=None) -> DumpConfig | None:
    """The dump config, None when dumping is off; DumpConfigError on a bad value (directory checks are
    the writer's, at start-up)."""
    env = os.environ if env is None else env
    d = env.get(ENV_DIR, "")
    if not d:
        return None
    fmt = env.get(ENV_FORMAT, "") or "safetensors"
    if fmt not in FORMATS:
        raise DumpConfigError(f"{ENV_FORMAT}={fmt!r}: supported {FORMATS} (convert with "
                              f"`python -m sglang_eagle3_ext.dump export --to speculators|specforge`)")
    final = env.get(ENV_FINAL, "") or "prenorm"
    if final not in FINAL_MODES:
        raise DumpConfigError(f"{ENV_FINAL}={final!r}: expected one of {FINAL_MODES}")
    try:
        mb = int(env.get(ENV_MAX_PENDING_MB, "") or 4096)
        io = int(env.get(ENV_IO_THREADS, "") or 8)
    except ValueError as e:
        raise DumpConfigError(f"{ENV_MAX_PENDING_MB}/{ENV_IO_THREADS}: {e}") from None
    if mb <= 0 or io <= 0:
        raise DumpConfigError(f"{ENV_MAX_PENDING_MB} and {ENV_IO_THREADS} must be positive")
    encoding = _choice(env, ENV_ENCODING, "bf16", ENCODINGS,
                       "bf16: hidden states as captured; fp8: e4m3 with per-token per-layer scales, ~0.5x")
    copy_stream = _flag(env, ENV_COPY_STREAM, "1", "1 (side stream) or 0 (compute stream)")
    discard = _flag(env, ENV_DISCARD, "0", "0 (write samples) or 1 (benchmarking: write none)")
    writer = _choice(env, ENV_WRITER, "thread", WRITERS,
                     "process: the files are written by a child process, off the scheduler's GIL")
    return DumpConfig(dump_dir=os.path.abspath(d), layers=parse_layers(env.get(ENV_LAYERS, "")),
                      fmt=fmt, final=final, max_pending_bytes=mb << 20, io_threads=io, encoding=encoding,
                      min_tokens=min_sample_tokens(env), copy_stream=copy_stream, discard=discard,
                      writer=writer)
