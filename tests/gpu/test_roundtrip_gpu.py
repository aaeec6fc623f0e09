"""The round trip on real SGLang (GPU): dump -> train with speculators -> convert/check -> serve EAGLE-3 -> bench.

One test, each step through the product's own CLIs, timings and figures written to
$OUT/roundtrip_<target>_<backend>.json. It can fail: the accept length threshold is measured on held-out prompts
with greedy decoding, and the outputs with speculation must equal those without, token for token.
Every server runs with CUDA graphs on (decode and the draft's), as users serve.

SGE3_RT_TARGET picks the target:
- `tiny` (default): tiny.PREDICTABLE, hidden 1024, 4 layers. Its step costs about what the 1-layer draft's
  does, so the speedup printed there says nothing (0.32x was measured); accept length >= 2.0 is asserted.
- `kimi`: tiny.KIMI_PREDICTABLE, Kimi-K2.5's width (hidden 7168), 10 layers, 16 experts with routing pinned to 8
  (~16 GB, drawn on the GPU at first use): speculation pays there. Asserted: accept length >= 3.0, greedy outputs identical,
  speedup >= 1.8x at batch 1 and >= 1.3x at batch 16 against the same server without speculation. Batch 16 is
  timed twice: with SGE3_RT_NEW_TOKENS (128) tokens per request, and with SGE3_RT_LONG_TOKENS (128:896: each
  request's length drawn from that range, the same for both servers), where the 1.3x is asserted. Why: every
  admission (a new request's prefill) stalls the running batch. With one fixed length the server without
  speculation finishes its requests together and admits them in whole cohorts (14 prefill batches for 128
  requests), while EAGLE-3's finish out of step (42): real traffic, answers of every length, gives neither
  server cohorts. And on this 10-layer toy an eager prefill is CPU-bound (GPU busy 5% in its trace) at ~30 ms,
  8x a 3.6 ms decode step; on Kimi-K2.5 itself (a decode step of tens of ms at TP8 over PCIe, answers of
  thousands of tokens) admissions are a far smaller share, which a mean of 512 tokens here approaches.
  Both figures are printed and kept in the JSON.
SGE3_RT_BACKEND: the attention backend of every server (default triton). SGE3_RT_SERVE_BACKEND (e.g. flashmla):
the two timed servers' backend instead (the dump stays on SGE3_RT_BACKEND; the draft of an MLA-only backend on
Triton); for the `kimi` target on Hopper it defaults to flashmla (docs/results.md: batch 16 at 128:896 1.58x there,
1.24x on Triton, same draft). Why: Triton verifies an MLA target with its extend kernel, which reads the shared
latent KV once per head (64 heads on this TP1 toy): a profile at batch 16 put it at 4.7 ms of an 11.4 ms iteration (decode's
grouped kernel: 0.3 ms), the iteration cost that caps batch 16; Hopper deployments verify with FA3 or FlashMLA.
(SGLang 0.5.16's hybrid `--decode-attention-backend flashmla --speculative-attention-mode decode` is no way round:
with Triton prefill, EAGLE's verify asks HybridAttnBackend for `max_context_len`, which it lacks.)
SGE3_RT_SERVE_ARGS: more SGLang arguments for both timed servers (e.g. `--max-running-requests 16
--min-free-slots-delay 3`: admissions in groups, 0.5.16+). SGE3_RT_SPEC_STEPS: --speculative-num-steps (3).
SGE3_RT_PREPARE_ONLY=1 (with SGE3_RT_DIR): stop after dump, train, convert and check; the next run serves and benches.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import knobs
import pytest
from gpu_helpers import LOG_DIR, REPO, activation_env, free_port, multi_gpu_tp, sglang_server

from sglang_eagle3_ext.server.started import eagle3_chain_args

pytestmark = pytest.mark.gpu
TARGET = knobs.get("SGE3_RT_TARGET")
KIMI = TARGET == "kimi"
# Kimi width: ~57 KB of dumped states per token (4 x 7168 x bf16), so fewer samples keep the dump and its
# export under ~15 GB of disk; the draft (~1B parameters) learns the walk from them in a few epochs
N_TRAIN = int(knobs.get("SGE3_RT_SAMPLES", "1000" if KIMI else "2000"))
N_HELDOUT = 32
# bf16 (as captured) or fp8 (compact dumps): the accept lengths of the two runs are compared
ENCODING = knobs.get("SGE3_RT_ENCODING")
BACKEND = knobs.get("SGE3_RT_BACKEND")


def _hopper() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


# the timed servers' attention backend, as printed and in the results' file name. The Kimi-width target is
# timed on FlashMLA on Hopper by default (as deployments verify MLA; the docstring says why not Triton)
ATTN = knobs.get("SGE3_RT_SERVE_BACKEND") or ("flashmla" if KIMI and _hopper() else BACKEND)
# backends that serve MLA layers only: the (Llama) draft runs on Triton beside them
MLA_ONLY = ("flashmla", "cutlass_mla", "trtllm_mla")
DRAFT_ARGS = ["--speculative-draft-attention-backend", "triton"] if ATTN in MLA_ONLY else []
MIN_ACCEPT = 3.0 if KIMI else 2.0
N_NEW = int(knobs.get("SGE3_RT_NEW_TOKENS", "128" if KIMI else "64"))
N_LONG = knobs.get("SGE3_RT_LONG_TOKENS")  # bench --max-new-tokens: N or LO:HI
# (name, batch size, bench --max-new-tokens) of each timed bench run
LEVELS = [("bs1", 1, N_NEW), ("bs16", 16, N_NEW)] + ([("bs16_long", 16, N_LONG)] if KIMI else [])
# level -> speedup vs the same server without speculation (the docstring says why batch 16 at N_LONG)
MIN_SPEEDUP = {"bs1": 1.8, "bs16_long": 1.3} if KIMI else {}
# CUDA graphs stay on; a small capture range keeps start-up quick and covers batch 16
GRAPH_ARGS = ["--cuda-graph-max-bs", "16"]
SERVE_ARGS = ["--attention-backend", BACKEND, *GRAPH_ARGS]
# the timed servers' arguments, the same for the EAGLE-3 and the baseline server
TIMED_ARGS = ["--attention-backend", ATTN, *GRAPH_ARGS, *knobs.get("SGE3_RT_SERVE_ARGS", "").split()]
# both servers log every 5th decode iteration: bench reads iteration and admission costs from the logs
LOG_ARGS = ["--decode-log-interval", "5"]
# SGE3_RT_SPEC_STEPS: --speculative-num-steps of the EAGLE-3 server (draft tokens = steps + 1, top-k 1)
SPEC_STEPS = int(knobs.get("SGE3_RT_SPEC_STEPS"))
SPEC_ARGS = [*eagle3_chain_args(SPEC_STEPS), *LOG_ARGS]
# the draft's training recipe (test_eval_gpu.py stops the same recipe early for drafts of middling quality)
EPOCHS = knobs.get("SGE3_RT_EPOCHS", "8" if KIMI else "12")
# calibrated on CPU (hidden 128 target, 300 samples): lr 1e-3 x 10 epochs -> val acc 0.33, 3e-3 x 30 -> 0.54
# (data-limited); hence more samples and the higher rate on the tiny target
LR = knobs.get("SGE3_RT_LR", "1e-3" if KIMI else "3e-3")
# speculators 0.9's fused Triton loss fails under torch 2.11 dynamo (ListVariable already tracked)
TRAIN_ARGS = ["--epochs", EPOCHS, "--lr", LR, "--loss-impl", "eager"]


def _prompts(path: Path, n: int, seed: int, prefix: str) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            ids = [rng.randrange(10, 4000) for _ in range(rng.randrange(16, 48))]
            f.write(json.dumps({"id": f"{prefix}{i:05d}", "input_ids": ids}) + "\n")


def _run(cmd: list[str], name: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", *cmd],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    (LOG_DIR / f"rt_{name}.log").write_text(
        f"$ {' '.join(cmd)}\n# rc={p.returncode} {time.time() - t0:.1f}s\n{p.stdout}\n--- stderr ---\n{p.stderr}"
    )
    return p


def _done(d: Path) -> bool:
    return (d / ".rt_stage_done").exists()


def _mark(d: Path) -> None:
    (d / ".rt_stage_done").touch()


def dump_and_export(preset: str, target: Path, train: Path, dump: Path, hs: Path, env: dict, tag: str) -> None:
    """Stages 1-3 of a round trip, each skipped when a previous run finished it: serve `target` with the dump
    `preset`, generate 96 greedy tokens for every train prompt through `dump run --generate`, export for
    speculators (response-only loss masks from the --generate run)."""
    server = (
        contextlib.nullcontext(("", None, None))
        if _done(dump)
        else sglang_server(
            ["--preset", preset, "--model-path", str(target), *SERVE_ARGS],
            name=f"rt_{tag}dump_server",
            port=free_port(),
            env=env,
        )
    )
    with server as (base, _, _):
        if not _done(dump):
            p = _run(
                [
                    "sglang_eagle3_ext.dump",
                    "run",
                    "--url",
                    base,
                    "--data",
                    str(train),
                    "--dump-dir",
                    str(dump),
                    "--generate",
                    "--max-new-tokens",
                    "96",
                    "--concurrency",
                    "64",
                    "--quiet",
                ],
                f"{tag}dump_client",
                env,
            )
            assert p.returncode == 0, p.stderr[-3000:]
            _mark(dump)
    if not _done(hs):
        p = _run(
            [
                "sglang_eagle3_ext.dump",
                "export",
                "--dump-dir",
                str(dump),
                "--to",
                "speculators",
                "--out",
                str(hs),
                "--data",
                str(train),
            ],
            f"{tag}export",
        )
        assert p.returncode == 0, p.stderr[-3000:]
        _mark(hs)


def test_roundtrip(tmp_path):
    """SGE3_RT_DIR=DIR keeps the stages' outputs there and skips finished stages on a re-run, so the
    round trip can span two runs (e.g. two commands with a time limit each) on a host that stays up."""
    work = Path(knobs.get("SGE3_RT_DIR") or tmp_path) / ("kimi" if KIMI else "")  # own stages per target
    work.mkdir(parents=True, exist_ok=True)
    from sglang_eagle3_ext.tiny.deepseek_v3 import KIMI_PREDICTABLE, PREDICTABLE, ensure_tiny_target

    # a target whose greedy walk is learnable and far from bf16 ties (see tiny.PREDICTABLE for why)
    spec = KIMI_PREDICTABLE if KIMI else PREDICTABLE
    t = time.time()
    tiny_target = ensure_tiny_target(work / "target", **spec)
    fig: dict = {
        "sglang": __import__("importlib.metadata").metadata.version("sglang"),
        "samples": N_TRAIN,
        "target": spec,
        "target_name": TARGET,
        "attention_backend": BACKEND,
        "serve_backend": ATTN,
        "cuda_graphs": "on",
        "encoding": ENCODING,
        "target_s": round(time.time() - t, 1),
    }
    t_all = time.time()
    train, held = work / "train.jsonl", work / "heldout.jsonl"
    _prompts(train, N_TRAIN, 1, "t")
    _prompts(held, N_HELDOUT, 2, "h")
    # batch 16 is timed on 4x as many held-out prompts: 32 prompts at concurrency 16 gave a 0.2-0.5 s window on
    # the tiny target, where one scheduling hiccup moved the speedup by 2x (0.81x and 1.51x seen)
    held16 = work / "heldout_bs16.jsonl"
    _prompts(held16, 4 * N_HELDOUT, 3, "g")
    dump = work / "dump"
    dump.mkdir(exist_ok=True)
    # Kimi width: SGLang's own EAGLE-3 choice [2, n//2, n-3] over the preset's [1, 2, 3] (made for 4 layers); not
    # starting with 1, every release's +1 rule captures these ids as is, so plain SGLang serves the draft alike
    # (benchmarks/bench_serve.py compares the two on this draft)
    n = spec.get("num_hidden_layers", 4)
    layers = {"SGLANG_EAGLE3_EXT_DUMP_LAYERS": f"2,{n // 2},{n - 3}"} if KIMI else {}
    env = activation_env(work, SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump), SGLANG_EAGLE3_EXT_DUMP_ENCODING=ENCODING, **layers)

    # 1-3. dump the target's own generations through the launch wrapper's dump preset, export
    t = time.time()
    hs = work / "hs"
    dump_and_export("tiny-dump", tiny_target, train, dump, hs, env, "")
    fig["dump_s"] = round(time.time() - t, 1)

    # 4. train with speculators
    t = time.time()
    spec_ckpt = work / "draft_speculators"
    if not (spec_ckpt / "config.json").exists():
        p = _run(
            [
                "sglang_eagle3_ext.train_draft",
                "--data",
                str(hs),
                "--target",
                str(tiny_target),
                "--out",
                str(spec_ckpt),
                "--device",
                "cuda",
                *TRAIN_ARGS,
            ],
            "train",
            timeout=900,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        fig["train_summary"] = (p.stdout.strip().splitlines() or [""])[-1]
    fig["train_s"] = round(time.time() - t, 1)

    # 4. convert + check
    draft = work / "draft_sglang"
    if draft.exists():
        import shutil

        shutil.rmtree(draft)
    p = _run(["sglang_eagle3_ext.convert", str(spec_ckpt), str(draft)], "convert")
    assert p.returncode == 0, p.stderr[-3000:]
    p = _run(["sglang_eagle3_ext.check", str(draft), "--target", str(tiny_target), "--scan-values"], "check")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    if knobs.get("SGE3_RT_PREPARE_ONLY"):
        # the timed part (serving, bench) later, on a GPU no other job shares: a re-run resumes from here
        pytest.skip(f"prepared in {work} (dump, train, convert, check); re-run without SGE3_RT_PREPARE_ONLY to serve")

    # 6a. a historical failure, now loud: the unconverted speculators checkpoint is refused before SGLang starts
    p = _run(
        [
            "sglang_eagle3_ext.launch_server",
            "--preset",
            "tiny",
            "--model-path",
            str(tiny_target),
            "--speculative-draft-model-path",
            str(spec_ckpt),
            *SPEC_ARGS,
            "--port",
            str(free_port()),
        ],
        "unconverted",
        activation_env(work),
        timeout=300,
    )
    assert p.returncode != 0 and "python -m sglang_eagle3_ext.convert" in p.stderr, p.stderr[-2000:]
    fig["unconverted_refused"] = p.stderr.strip().splitlines()[-1][:200]

    # 5. serve target + draft and the plain target side by side (CUDA graphs on); bench on held-out prompts at
    # batch 1 and 16, each after a warm-up pass (first-request JIT and prefill shapes off the clock)
    serve_env = activation_env(work)
    fig["serve_args"] = TIMED_ARGS
    timed = ["--preset", "tiny", "--model-path", str(tiny_target), *TIMED_ARGS]
    with (
        sglang_server(
            [*timed, "--speculative-draft-model-path", str(draft), *SPEC_ARGS, *DRAFT_ARGS],
            name="rt_spec_server",
            port=free_port(),
            env=serve_env,
        ) as (spec_url, spec_log, _),
        sglang_server([*timed, *LOG_ARGS], name="rt_base_server", port=free_port(), env=serve_env) as (
            base,
            base_log,
            _,
        ),
    ):
        fig["bench"] = {}
        for name, bs, n_new in LEVELS:
            _run(
                [
                    "sglang_eagle3_ext.bench",
                    "--url",
                    spec_url,
                    "--baseline-url",
                    base,
                    "--prompts",
                    str(held),
                    "--max-new-tokens",
                    "8",
                    "--concurrency",
                    str(bs),
                ],
                f"bench_warm_{name}",
            )
            out_json = LOG_DIR / f"rt_bench_{name}.json"
            p = _run(
                [
                    "sglang_eagle3_ext.bench",
                    "--url",
                    spec_url,
                    "--baseline-url",
                    base,
                    "--prompts",
                    str(held if bs == 1 else held16),
                    "--max-new-tokens",
                    str(n_new),
                    "--concurrency",
                    str(bs),
                    "--json",
                    str(out_json),
                    "--spec-log",
                    str(spec_log),
                    "--baseline-log",
                    str(base_log),
                    "--log-interval",
                    LOG_ARGS[1],
                ],
                f"bench_{name}",
            )
            res = json.loads(out_json.read_text())
            res["rc"] = p.returncode
            fig["bench"][name] = res
        # the reference of test_draft_at_tp_n and test_draft_retrained_on_serving_dump: heldout.jsonl's figures
        (work / "bench_tp1.json").write_text((LOG_DIR / "rt_bench_bs1.json").read_text())
    fig["wall_s"] = round(time.time() - t_all, 1)
    (LOG_DIR / f"roundtrip_{TARGET}_{ATTN}.json").write_text(json.dumps(fig, indent=2))
    print(json.dumps(fig, indent=2))
    for name, res in fig["bench"].items():
        print(
            f"round trip [{TARGET}, {ATTN}, CUDA graphs on] {name} x {res['max_new_tokens']} tokens: accept "
            f"length {res['spec']['accept_length']:.2f}, speedup {res.get('speedup') or 0:.2f}x, {res['verdict']}"
        )
    for name, res in fig["bench"].items():
        # bench fails on an unused draft or changed outputs (asserted below by name); on the 1024-wide target it
        # may also flag its (expected) slowdown, which is not this test's subject there
        assert res["rc"] == 0 or not KIMI, res["verdict"]
        assert res["spec"]["accept_length"] >= MIN_ACCEPT, (name, res)
        assert "greedy outputs identical" in res["verdict"], (name, res["verdict"])
    for name, want in MIN_SPEEDUP.items():
        got = fig["bench"][name]["speedup"]
        assert got >= want, f"{name}: speedup {got:.2f}x < {want}x"


def test_draft_at_tp_n():
    """The round trip's draft served with TP=N (every GPU up to 8, or $SGE3_TP): accept length within 5 % of
    TP=1 on the same held-out prompts. Needs a finished round trip in $SGE3_RT_DIR (run it first)."""
    work = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent") / ("kimi" if KIMI else "")
    ref, draft, target = work / "bench_tp1.json", work / "draft_sglang", work / "target"
    tp = multi_gpu_tp()
    if not tp or not ref.exists():
        pytest.skip("needs >= 2 GPUs and a finished round trip in $SGE3_RT_DIR")
    out_json = LOG_DIR / f"rt_bench_tp{tp}.json"
    with sglang_server(
        [
            "--preset",
            "tiny",
            "--model-path",
            str(target),
            *SERVE_ARGS,
            "--speculative-draft-model-path",
            str(draft),
            "--tp",
            str(tp),
            *SPEC_ARGS,
        ],
        name=f"rt_spec_tp{tp}",
        port=free_port(),
        env=activation_env(work),
    ) as (spec, _, _):
        p = _run(
            [
                "sglang_eagle3_ext.bench",
                "--url",
                spec,
                "--prompts",
                str(work / "heldout.jsonl"),
                "--max-new-tokens",
                "64",
                "--concurrency",
                "8",
                "--json",
                str(out_json),
            ],
            f"bench_tp{tp}",
        )
    a1 = json.loads(ref.read_text())["spec"]["accept_length"]
    an = json.loads(out_json.read_text())["spec"]["accept_length"]
    print(f"\naccept length TP=1 {a1:.3f}, TP={tp} {an:.3f} (ratio {an / a1:.3f})")
    assert p.returncode == 0, p.stdout[-2000:]
    assert abs(an / a1 - 1) <= 0.05, (a1, an)
