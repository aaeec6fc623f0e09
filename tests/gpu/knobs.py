"""Every `SGE3_*` environment setting of the GPU tests, the benchmarks and the test scripts, in one table.

Python code reads them through `get` (an undeclared name is a KeyError, so a typo cannot silently read
nothing); shell scripts and the CPU suite's `tests/unit/compat/test_compat.py` read the environment directly, but
their names are declared here too. `python tests/gpu/knobs.py` prints the table that tests/gpu/README.md
holds; tests/unit/test_gpu_knobs.py keeps the table, the README and the code in step.
"""

from __future__ import annotations

import os
from typing import NamedTuple


class Knob(NamedTuple):
    name: str
    default: str | None  # None: unset; the reader's own default applies (the meaning says which)
    meaning: str


_TABLE = (
    # where the tests run and write
    Knob("SGE3_LOG_DIR", "/tmp/sge3_logs", "server logs and results when `$OUT` is unset"),
    Knob(
        "SGE3_START_LOCK",
        "/tmp/sge3_gpu_start.lock",
        "lock file letting one test server start at a time (SGLang sizes its KV cache from the memory free then)",
    ),
    Knob(
        "SGE3_WRITE_FLAGS_SNAPSHOT",
        None,
        "CPU suite, `test_cli_flags_snapshot.py`: 1 writes every command's flags as the parsers declare them into the "
        "snapshot (a deliberate flag change)",
    ),
    Knob("SGE3_LEDGER_COMMIT", None, "`ledger.py record`: the commit the stage ran (the host has no git history)"),
    Knob("SGE3_BG_ROOT", "/tmp/sge3_bg", "`bg.sh`: where the background jobs keep their state and logs"),
    Knob("SGE3_TINY_DIR", None, "keep the tiny target here between runs (default: a fresh temporary folder)"),
    Knob(
        "SGE3_TEST_WHEEL_DIRS",
        "/work/wheels",
        "CPU suite, `test_compat.py`: folders (`:`-separated) of SGLang wheels for `compat --download`",
    ),
    Knob(
        "SGE3_LOCKED_RELEASE",
        None,
        "CPU suite, `tests/conftest.py` (set by `.ci/run`): the SGLang release whose lock the environment must match",
    ),
    Knob(
        "SGE3_LOCK_FILE",
        None,
        "CPU suite, `tests/conftest.py`: another lock file to hold the environment to (default: that release's)",
    ),
    # how the test servers run
    Knob(
        "SGE3_SERVE_BACKEND",
        "triton",
        "attention backend of the draft, MLA-draft and dump-while-serving tests' servers (e.g. `fa3`)",
    ),
    Knob(
        "SGE3_BACKENDS",
        "triton,flashinfer,fa3",
        "attention backends of the parametrised tests (one whose kernels are missing is skipped)",
    ),
    Knob(
        "SGE3_MEM_FRACTION",
        None,
        "`--mem-fraction-static` of each test server (several jobs on one GPU); benchmarks: their own default",
    ),
    Knob(
        "SGE3_MAX_TOTAL_TOKENS",
        None,
        "`--max-total-tokens` KV cap of each test server; `bench_serve.py`: its default (else 65536)",
    ),
    Knob("SGE3_TP", None, "TP size of the multi-GPU tests (default: every visible GPU, up to 8)"),
    Knob(
        "SGE3_RECORD_DRAFT_INPUT",
        None,
        "`draft_input_recorder.py`: folder where each spawned worker saves what the draft is fed (off when unset)",
    ),
    # the round trip (dump -> train -> convert -> check -> serve -> bench)
    Knob("SGE3_RT_TARGET", "tiny", "round-trip target: `tiny` or `kimi` (Kimi width, where speculation pays)"),
    Knob(
        "SGE3_RT_DIR",
        None,
        "keep the round trip's stages here, a re-run resumes; the bench and serving-dump tests reuse its draft",
    ),
    Knob(
        "SGE3_RT_PREPARE_ONLY",
        None,
        "set: stop the round trip after dump, train, convert and check (the Kimi wrapper's round trip too)",
    ),
    Knob("SGE3_RT_BACKEND", "triton", "attention backend of every round-trip server"),
    Knob(
        "SGE3_RT_SERVE_BACKEND",
        None,
        "attention backend of the two timed servers (default: `flashmla` for `kimi` on Hopper, else SGE3_RT_BACKEND)",
    ),
    Knob("SGE3_RT_SERVE_ARGS", None, "more SGLang arguments for both timed servers (default: none)"),
    Knob("SGE3_RT_SPEC_STEPS", "3", "`--speculative-num-steps` of the EAGLE-3 server"),
    Knob("SGE3_RT_NEW_TOKENS", None, "tokens per timed request (default 64; 128 for `kimi` in the round trip)"),
    Knob("SGE3_RT_LONG_TOKENS", "128:896", "tokens per request of the second timing: N or a `LO:HI` range"),
    Knob("SGE3_RT_SAMPLES", None, "dumped generations to train on (default 2000; 1000 for `kimi`)"),
    Knob("SGE3_RT_EPOCHS", None, "draft training epochs (default 12; 8 for `kimi` in the round trip)"),
    Knob("SGE3_RT_LR", None, "draft learning rate (default 3e-3; 1e-3 for `kimi` in the round trip)"),
    Knob(
        "SGE3_DFLASH_EPOCHS",
        "80",
        "`test_dflash_gpu.py`: the DFlash draft's training epochs on the round trip's export (600 samples: 12 do "
        "not learn, 80 reach accept 3.86 on an H100)",
    ),
    Knob("SGE3_DFLASH_LR", "3e-3", "`test_dflash_gpu.py`: the DFlash draft's learning rate"),
    Knob("SGE3_DFLASH_LEVELS", "1,4", "`test_dflash_gpu.py`: the concurrency levels both drafts are benched at"),
    Knob(
        "SGE3_REFRESH_REQUESTS",
        None,
        "`test_refresh_gpu.py`: training prompts served (and dumped) before the refresh (default 512)",
    ),
    Knob("SGE3_REFRESH_EPOCHS", None, "`test_refresh_gpu.py`: refresh --epochs (default 12)"),
    Knob(
        "SGE3_REFRESH_DIR",
        None,
        "`test_refresh_gpu.py`: folder for its serving dump and refresh output (default: the round trip's)",
    ),
    Knob(
        "SGE3_EVAL_EPOCHS",
        None,
        "`test_eval_gpu.py`: early checkpoints served beside the other drafts, e.g. `3` (the round trip's recipe "
        "stopped after 3 epochs; default: none)",
    ),
    Knob("SGE3_RT_ENCODING", "bf16", "dump encoding of the round trip (`bf16` or `fp8`)"),
    Knob("SGE3_SRV_DIR", None, "`test_dump_serving_gpu.py`: keep the retrain-on-serving-dump stages here"),
    Knob("SGE3_BENCH_LEVELS", "1,8,32", "`test_bench_gpu.py`: concurrency levels of `sglang-eagle3 bench`"),
    # the tiny Kimi-K2.5 wrapper's round trip
    Knob("SGE3_KIMI_RT_DIR", None, "`test_kimi_gpu.py`: keep its stages here, a re-run resumes"),
    Knob("SGE3_KIMI_SAMPLES", "600", "`test_kimi_gpu.py`: dumped generations to train on"),
    Knob("SGE3_KIMI_EPOCHS", "8", "`test_kimi_gpu.py`: training epochs of the Llama draft"),
    Knob("SGE3_KIMI_MLA_EPOCHS", "4", "`test_kimi_gpu.py`: training epochs of the MLA draft"),
    # tune at Kimi width
    Knob("SGE3_TUNE_BUDGET_MIN", "8", "`test_tune_gpu.py`: `tune --budget-min` (GPU minutes)"),
    Knob("SGE3_TUNE_BACKENDS", None, "`test_tune_gpu.py`: `tune --backends` (default `flashmla,fa3,triton`)"),
    # benchmarks
    Knob(
        "SGE3_TRAIN_BENCH_STEPS",
        "30",
        "`test_train_gpu.py`: optimizer steps of each `bench_train.py` run (the first 5 are left out of the figures)",
    ),
    Knob(
        "SGE3_SPECFORGE_SCRIPT",
        None,
        "`bench_dump.py`: SpecForge's `prepare_hidden_states.py` (default: the vendored copy)",
    ),
)
KNOBS = {k.name: k for k in _TABLE}


def get(name: str, default: str | None = None) -> str | None:
    """$name when set and non-empty, else its declared default, else `default` (only for a knob declared
    without one: a default lives in one place)."""
    knob = KNOBS[name]
    if default is not None and knob.default is not None:
        raise ValueError(f"{name} has a declared default ({knob.default!r}); read it without one")
    return os.environ.get(name) or (knob.default if knob.default is not None else default)


def markdown_table() -> str:
    """The README's table: one row a knob, in declaration order."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for k in _TABLE:
        rows.append(f"| `{k.name}` | {'' if k.default is None else f'`{k.default}`'} | {k.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
