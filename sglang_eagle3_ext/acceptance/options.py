"""What `eval` takes; each field with a command line is declared here once (`options.schema.flag`), in the order
`eval --help` lists them, and `cli/eval.py` derives its parser from it."""

from __future__ import annotations

import dataclasses

from ..options import values
from ..options.schema import flag

DTYPES = ("bf16", "fp32")
DEFAULT_STEPS = 3
# Bounds on the flags that size the work: refused up front rather than computing for hours or exhausting memory
MAX_STEPS = 16  # draft steps simulated per anchor (each one a forward over every row)
MAX_TOPK = 64
MAX_SAMPLES = 10_000_000
MAX_BATCH_TOKENS = 1 << 20  # rows of one simulated batch
MAX_CONCURRENCY = 1024
MAX_TIMEOUT_S = 86_400.0


def _between(low: int, high: int):
    return values.int_between(low, high)


@dataclasses.dataclass(kw_only=True)
class EvalOptions:
    draft: str = flag(
        required=True,
        type=values.folder_in("give the draft's folder, in the layout SGLang serves"),
        help="the draft's folder, in the layout SGLang serves (a speculators "
        "checkpoint: `sglang-eagle3 convert` it first)",
    )
    data: str = flag(
        required=True,
        type=values.folder_in(
            "give a dump folder or a training export (`dump export --to speculators`)",
            "eval reads hidden states, not prompts: give a dump folder or a training export",
        ),
        help="a dump dir (dump_meta.json + manifests) or a training export "
        "(hs_{i}.safetensors, `dump export --to speculators`)",
    )
    target: str | None = flag(
        None,
        type=values.folder_in("give the target model's folder"),
        help="the target model's folder: its embeddings (and lm_head when the "
        "draft shares it), as a server installs them (default: the model path the data records)",
    )
    steps: int = flag(
        DEFAULT_STEPS,
        type=_between(1, MAX_STEPS),
        help=f"--speculative-num-steps of the server to predict, 1..{MAX_STEPS} (a DFlash draft: its block size - 1, "
        "the drafts one verify round judges)",
    )
    topk: int = flag(1, type=_between(1, MAX_TOPK), help="--speculative-eagle-topk (only 1 is simulated)")
    # None: steps + 1
    draft_tokens: int | None = flag(
        None,
        type=_between(1, MAX_STEPS + 1),
        help="--speculative-num-draft-tokens (with topk 1: steps + 1, the default)",
    )
    heldout_fraction: float = flag(
        0.05,
        type=values.number_in(0.0, 1.0),
        help="the share `train` holds out (1 - train's --train-ratio); 1: every sample",
    )
    # at most this many of the held-out samples (the first ones)
    samples: int | None = flag(
        None,
        type=_between(1, MAX_SAMPLES),
        help=f"evaluate at most this many held-out samples (the first ones), 1..{MAX_SAMPLES:_}; default: all",
    )
    # None: cuda when there is one
    device: str | None = flag(
        None, type=values.torch_device, help="torch device (default: cuda when there is one, else cpu)"
    )
    dtype: str = flag("bf16", choices=DTYPES, help="weights and activations (bf16: as served)")
    # rows simulated at once
    batch_tokens: int = flag(
        8192, type=_between(1, MAX_BATCH_TOKENS), help=f"tokens simulated at once, 1..{MAX_BATCH_TOKENS}"
    )
    # --url and the flags of its requests: the served accept length measured beside the prediction
    url: str | None = flag(
        None,
        type=values.server_url,
        help="a running EAGLE-3 server of this draft: send it the same held-out "
        "prompts and report its accept length beside the prediction",
    )
    concurrency: int = flag(
        8, type=_between(1, MAX_CONCURRENCY), help=f"requests in flight with --url, 1..{MAX_CONCURRENCY}"
    )
    timeout: float = flag(
        300.0,
        type=values.number_in(0.0, MAX_TIMEOUT_S),
        help=f"seconds for each request with --url, at most {MAX_TIMEOUT_S:g}",
    )
    # check the inputs and report the plan; load, simulate, send nothing
    dry_run: bool = flag(
        False,
        action="store_true",
        help="check every local input and print the plan (held-out "
        "samples, settings) in seconds; no weight is loaded, no sample simulated, no request sent",
    )
    say: object = None  # progress lines (None: silent)
