"""Draft-training throughput: tokens/s per process and the loader's share of the step time, from one run.

    python benchmarks/bench_train.py [--kimi-width] [--arch mla|llama] [--nproc N] [--steps 30] [--warmup 5]
        [--samples 48] [--tokens 512] [--num-workers 4] [--device cuda|cpu] [--json OUT.json]

Makes a target that holds only what training reads (config.json + embed / lm_head / final norm, random) and
`--samples` random hidden-state files of `--tokens` tokens each (at --kimi-width: hidden 7168, vocab 163,840,
~57 KB per token, 3 aux layers + the final state, bf16), then trains the draft `--steps` optimizer steps with
`sglang-eagle3 train` (one micro-batch per process per step; the Llama route packs --tokens x 4 per sequence).
Per step the trainer measures the time waiting for the next batch (the loader) and the whole step; the first
`--warmup` steps (start-up, compilation) are left out. Default: a tiny width that runs on a CPU in seconds.

With --nproc N > 1 the same run goes through `torchrun --nproc-per-node N` and is compared with one process:
the scaling ratio is N processes' tokens/s over one's (goal >= 1.8 for 2 GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TINY = dict(
    hidden_size=64,
    vocab_size=256,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_rope_head_dim=16,
    qk_nope_head_dim=16,
    v_head_dim=16,
    intermediate_size=128,
)
KIMI = dict(
    hidden_size=7168,
    vocab_size=163840,
    num_attention_heads=64,
    num_key_value_heads=64,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    intermediate_size=18432,
)
AUX = [1, 2, 3]


def make_target(out: Path, width: dict, device: str) -> Path:
    """config.json of a DeepSeek-V3 at `width` and the three tensors training reads, random (bf16)."""
    import torch
    from safetensors.torch import save_file

    from sglang_eagle3_ext.tiny.deepseek_v3 import SGLANG_EXTRA_KEYS, TINY_CONFIG

    H, V = width["hidden_size"], width["vocab_size"]
    cfg = {
        **TINY_CONFIG,
        **width,
        **SGLANG_EXTRA_KEYS,
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 8,
        "torch_dtype": "bfloat16",
    }
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator(device=device).manual_seed(0)
    tensors = {
        "model.embed_tokens.weight": torch.randn(V, H, generator=g, device=device) * 0.02,
        "lm_head.weight": torch.randn(V, H, generator=g, device=device) * 0.02,
        "model.norm.weight": torch.ones(H, device=device),
    }
    save_file({k: v.to(torch.bfloat16).cpu().contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def make_data(out: Path, width: dict, samples: int, tokens: int, device: str) -> Path:
    import torch
    from safetensors.torch import save_file

    hs = out / "hidden_states"
    hs.mkdir(parents=True, exist_ok=True)
    H, V = width["hidden_size"], width["vocab_size"]
    g = torch.Generator(device=device).manual_seed(1)
    for i in range(samples):
        states = torch.randn(tokens, len(AUX) + 1, H, generator=g, device=device).to(torch.bfloat16).cpu()
        ids = torch.randint(0, V, (tokens,), generator=g, device=device).cpu()
        save_file({"token_ids": ids, "hidden_states": states.contiguous()}, str(hs / f"hs_{i}.safetensors"))
    (out / "metadata.json").write_text(json.dumps({"hf_hidden_state_indices": AUX}))
    return out


def train_argv(a, target: Path, data: Path, out: Path, nproc: int) -> list[str]:
    seq = a.tokens * 4
    return [
        "--data",
        str(data),
        "--target",
        str(target),
        "--out",
        str(out),
        "--draft-arch",
        a.arch,
        "--device",
        a.device,
        "--steps",
        str(a.steps),
        "--global-batch",
        str(nproc),
        "--num-workers",
        str(a.num_workers),
        "--total-seq-len",
        str(seq),
        "--min-val-acc",
        "0",
        "--log-every",
        "10",
        "--train-ratio",
        "0.95",
        "--force",
        "--loss-impl",
        a.loss_impl,
    ]


def run(a, target: Path, data: Path, work: Path, nproc: int) -> dict:
    """One training run; its summary (rank 0's under torchrun)."""
    summary = work / f"summary_{nproc}.json"
    argv = train_argv(a, target, data, work / f"out_{nproc}", nproc) + ["--json", str(summary)]
    peak = None
    if nproc == 1:
        import torch

        from sglang_eagle3_ext.cli import train as train_command
        from sglang_eagle3_ext.cli.common import run_tool

        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        rc = run_tool("train", train_command.main, argv)
        peak = torch.cuda.max_memory_allocated() / 2**30 if a.device == "cuda" else None
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            "-m",
            "sglang_eagle3_ext",
            "train",
            *argv,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "4")}
        rc = subprocess.run(cmd, env=env).returncode
    if rc != 0:
        raise SystemExit(f"bench_train: the training run on {nproc} process(es) failed (exit {rc})")
    return {**json.loads(summary.read_text()), "cuda_peak_gib": peak}


def plan_gib(a, target: Path, data: Path, work: Path) -> float:
    """`train --dry-run`'s memory per rank for the same run."""
    from sglang_eagle3_ext.cli import train as train_command
    from sglang_eagle3_ext.training import train_draft

    args = train_command.build_parser().parse_args(train_argv(a, target, data, work / "plan", 1) + ["--dry-run"])
    return train_draft(train_command.options_from_args(args))["per_rank_gib"]["total"]


def figures(summary: dict, warmup: int) -> dict:
    """tokens/s of this process and the loader's share of the step time, over the steps after the warm-up."""
    hist = summary["history"][warmup:] or summary["history"][-1:]
    secs = sum(h["time_s"] for h in hist)
    fetch = sum(h["fetch_s"] for h in hist)
    tokens = sum(h["tokens"] for h in hist)
    return {
        "steps_timed": len(hist),
        "tokens_per_s_per_process": tokens / secs,
        "loader_share": fetch / secs,
        "step_ms": 1e3 * secs / len(hist),
        "loader_ms": 1e3 * fetch / len(hist),
        "tokens_per_step_per_process": tokens / len(hist),
    }


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    ap.add_argument("--kimi-width", action="store_true", help="hidden 7168, vocab 163,840 (default: tiny)")
    ap.add_argument("--arch", choices=("mla", "llama"), default="mla")
    ap.add_argument("--nproc", type=int, default=1, help="processes (torchrun) beside the one-process run")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the figures")
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument(
        "--tokens", type=int, default=None, help="tokens per sample (default 2048 at --kimi-width, else 512)"
    )
    ap.add_argument("--num-workers", type=int, default=4, help="loader worker processes per rank")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--loss-impl", choices=("fused", "eager"), default="fused", help="llama: speculators' loss")
    ap.add_argument("--workdir", help="keep the target, data and outputs here (default: a temporary folder)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    a.tokens = a.tokens or (2048 if a.kimi_width else 512)
    a.warmup = min(a.warmup, max(0, a.steps - 2))
    return a


def main(argv=None) -> int:
    a = parse(argv)
    width = KIMI if a.kimi_width else TINY
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        work = Path(a.workdir or tmp)
        target = make_target(work / "target", width, a.device) if not (work / "target").exists() else work / "target"
        data = (
            make_data(work / "data", width, a.samples, a.tokens, a.device)
            if not (work / "data").exists()
            else work / "data"
        )
        summary = run(a, target, data, work, 1)
        one = dict(
            figures(summary, a.warmup), cuda_peak_gib=summary["cuda_peak_gib"], plan_gib=plan_gib(a, target, data, work)
        )
        result = {
            "arch": a.arch,
            "hidden_size": width["hidden_size"],
            "vocab_size": width["vocab_size"],
            "device": a.device,
            "tokens_per_sample": a.tokens,
            "num_workers": a.num_workers,
            "one": one,
        }
        print(
            f"bench_train: {a.arch} draft, hidden {width['hidden_size']}, vocab {width['vocab_size']}, {a.device}: "
            f"{one['tokens_per_s_per_process']:.0f} tokens/s per process, loader {one['loader_ms']:.1f} of "
            f"{one['step_ms']:.1f} ms per step = {one['loader_share']:.1%} of the step time (goal <= 10%)"
        )
        if one["cuda_peak_gib"] is not None:
            print(
                f"bench_train: GPU memory peak {one['cuda_peak_gib']:.1f} GiB, --dry-run planned "
                f"{one['plan_gib']:.1f} GiB"
            )
        if a.nproc > 1:
            many = figures(run(a, target, data, work, a.nproc), a.warmup)
            ratio = many["tokens_per_s_per_process"] * a.nproc / one["tokens_per_s_per_process"]
            result.update(nproc=a.nproc, many=many, scaling=ratio)
            print(
                f"bench_train: {a.nproc} processes: {many['tokens_per_s_per_process']:.0f} tokens/s each, "
                f"scaling {ratio:.2f}x one process (goal >= {0.9 * a.nproc:.1f}x), loader "
                f"{many['loader_share']:.1%}"
            )
        if a.json:
            Path(a.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
