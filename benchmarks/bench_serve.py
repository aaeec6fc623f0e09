"""GPU benchmark: what the package costs a server, measured as users serve (CUDA graphs on).

    python benchmarks/bench_serve.py [--model DIR --draft DIR] [--rounds 5] [--new-tokens 128]
                                     [--only spec,base,dump] [--attention-backend triton]

Servers, same target (default: the Kimi-width predictable target, tiny.KIMI_PREDICTABLE) and same draft:
  spec_on   EAGLE-3 with SGLANG_EAGLE3_EXT=1 (strict loader, fc guard, explicit capture layers)
  spec_off  the same EAGLE-3 command in plain SGLang (the variable unset: our .pth does one lookup)
  base_on / base_off   target only, with / without the package
  dump_on   target only, the package dumping every prefill (compared with base_on)
  spec_dump EAGLE-3 dumping while serving: prompt + response states (verify batches) of every request at the
            draft's layers (compared with spec_on; the target: >= 0.95 at Kimi width, batch 16)
The draft must be one plain SGLang serves identically: its recorded HF indices must be what the installed
release's own +1 rule captures from its layer ids (checked; a converted draft of ours qualifies). Default:
a random draft at the target's width, made with speculators and converted (accept length ~1, which still
costs every serving step its draft and verify passes); pass the round trip's trained draft
(`--model $SGE3_RT_DIR/kimi/target --draft $SGE3_RT_DIR/kimi/draft_sglang`) for the accepting path.

Each group (spec_*; base_* + dump_on) is served side by side on one GPU; every server is warmed with a whole
workload first, then rounds alternate the servers (order rotating) at batch 1 and 16: greedy requests of
--new-tokens tokens, output tokens/s per server per round. Prints, per batch size, the median over rounds
of the per-round ratios (drift cancels within a round):
  spec_on/spec_off  (the patches' cost on EAGLE-3 serving; acceptance >= 0.99)
  base_on/base_off  (target-only serving; >= 0.99)
  dump_on/base_on   (dumping every prefill while serving)
  spec_dump/spec_on (dump while serving EAGLE-3)
and whether spec_on and spec_off produced identical greedy outputs with the same accept length.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import knobs  # noqa: E402  (tests/gpu/knobs.py: the declared SGE3_* settings)

from sglang_eagle3_ext.server.started import eagle3_chain_args  # noqa: E402

SPEC_ARGS = eagle3_chain_args(3)
GROUPS = {
    "spec": ("spec_on", "spec_off"),
    "base": ("base_on", "base_off"),
    "dump": ("dump_on",),
    "specdump": ("spec_dump",),
}
RATIOS = (("spec_on", "spec_off"), ("base_on", "base_off"), ("dump_on", "base_on"), ("spec_dump", "spec_on"))


def prompts_for(bs: int, n_batches: int, seed: int, length: int = 64, vocab: int = 4000) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(length)] for _ in range(bs * n_batches)]


def workload(base: str, prompts, concurrency: int, new_tokens: int) -> dict:
    """Greedy requests, `concurrency` in flight; output tokens/s, tokens per verify step, the outputs."""
    from gpu_helpers import http_json

    def one(ids):
        return http_json(
            base + "/generate",
            {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}},
        )

    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        outs = list(ex.map(one, prompts))
    dt = time.perf_counter() - t
    toks = sum(int(o["meta_info"]["completion_tokens"]) for o in outs)
    verify = sum(int(o["meta_info"].get("spec_verify_ct") or 0) for o in outs)
    return {
        "tok_s": toks / dt,
        "accept_length": toks / verify if verify else None,
        "outputs": [o.get("output_ids") for o in outs],
    }


def check_draft(draft: Path) -> dict:
    """The draft's eagle_config, refused unless plain SGLang captures the HF indices it was trained on."""
    from sglang_eagle3_ext.draft.keys import HF_INDICES_FIELD, installed_layout, release_aux_ids

    ec = json.loads((draft / "config.json").read_text()).get("eagle_config") or {}
    hf, ids = ec.get(HF_INDICES_FIELD), ec.get("eagle_aux_hidden_state_layer_ids")
    if not hf or not ids:
        raise SystemExit(
            f"{draft}: config.json eagle_config lacks {HF_INDICES_FIELD} or layer ids; "
            f"convert it first: python -m sglang_eagle3_ext.convert SRC {draft}"
        )
    want, warn = release_aux_ids(hf, installed_layout())
    if warn or list(want) != list(ids):
        raise SystemExit(
            f"{draft}: plain SGLang would capture other layers than HF {hf} from ids {ids} ({warn or want}): "
            f"spec_off would not serve the same draft; pick HF indices not starting with 1"
        )
    return ec


def make_draft(model: Path, out: Path | None = None) -> Path:
    """A random 1-layer draft at the target's width, made by speculators and converted for this release; kept
    beside the target (out=None), so the benchmarks of one GPU session make it once."""
    import subprocess

    import torch

    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    out = out or model.with_name(model.name + "-random-draft")
    if (out / "sglang" / "config.json").exists():
        return out / "sglang"
    cfg = json.loads((model / "config.json").read_text())
    h, n, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    hf = [2, n // 2, n - 3]  # speculators' default; not starting with 1: every release captures it as is
    src = make_speculators_draft(
        out / "spec",
        hidden=h,
        vocab=v,
        draft_vocab=v,
        aux_ids=hf,
        heads=h // 128,
        kv_heads=8,
        intermediate=cfg["intermediate_size"],
        target_hidden=h,
        dtype=torch.bfloat16,
    )
    dst, part = out / "sglang", out / "sglang.partial"
    p = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.convert", str(src), str(part), "--force"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if p.returncode:
        raise SystemExit(f"converting the random draft failed:\n{p.stdout}\n{p.stderr}")
    part.rename(dst)  # whole or absent: the next benchmark reuses only a finished draft
    return dst


def server_envs(tmp: Path, dump_dir: Path) -> dict:
    from gpu_helpers import activation_env

    on = activation_env(tmp)
    off = {k: v for k, v in on.items() if k != "SGLANG_EAGLE3_EXT"}
    off["SGLANG_EAGLE3_EXT"] = None  # unset even if the caller's shell set it
    dump = activation_env(tmp, SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump_dir))
    spec_dump_dir = dump_dir.with_name(dump_dir.name + "_spec")  # other layers (the draft's): its own dir
    spec_dump_dir.mkdir(exist_ok=True)
    spec_dump = activation_env(tmp, SGLANG_EAGLE3_EXT_DUMP_DIR=str(spec_dump_dir))
    return {"spec_on": on, "spec_off": off, "base_on": on, "base_off": off, "dump_on": dump, "spec_dump": spec_dump}


def run_group(names, args_for, envs, a, prompts, res) -> None:
    from gpu_helpers import free_port, sglang_server

    with contextlib.ExitStack() as stack:
        bases = {}
        for name in names:  # one after another: each sizes its KV cache from the memory free at its start
            bases[name] = stack.enter_context(
                sglang_server(
                    args_for(name),
                    name=f"bench_serve_{name}",
                    port=free_port(),
                    env=envs[name],
                    launcher="sglang.launch_server",
                    timeout=900,
                )
            )[0]
        for name in names:  # warm-up off the clock: the same workloads once (JIT, prefill shapes, writer)
            for bs in (1, 16):
                workload(bases[name], prompts[bs]["warm"], bs, a.new_tokens)
        for bs in (1, 16):
            for r in range(a.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    w = workload(bases[name], prompts[bs]["rounds"][r], bs, a.new_tokens)
                    res["rounds"].setdefault(f"{name}_bs{bs}", []).append(round(w["tok_s"], 1))
                    res.setdefault("outputs", {}).setdefault(f"{name}_bs{bs}", []).extend(w["outputs"])
                    if w["accept_length"] is not None:
                        res.setdefault("accept", {}).setdefault(f"{name}_bs{bs}", []).append(w["accept_length"])
                print(
                    f"bs {bs} round {r}: "
                    + ", ".join(f"{n} {res['rounds'][f'{n}_bs{bs}'][-1]:.0f} tok/s" for n in names),
                    flush=True,
                )


def add_serving_args(ap: argparse.ArgumentParser) -> None:
    """The target, draft and server flags of this benchmark and benchmarks/profile_spec.py."""
    ap.add_argument("--model", help="target dir (default: the Kimi-width predictable target, made on first use)")
    ap.add_argument("--draft", help="converted EAGLE-3 draft dir (default: a random one at the target's width)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--attention-backend", default="triton")
    # the default follows SGE3_MAX_TOTAL_TOKENS, which gpu_helpers.sglang_server appends after these flags (last wins)
    ap.add_argument(
        "--max-total-tokens",
        type=int,
        default=int(knobs.get("SGE3_MAX_TOTAL_TOKENS", "65536")),
        help="each server's KV cap in tokens (default $SGE3_MAX_TOTAL_TOKENS or 65536: 16 x (64 + 128) "
        "tokens with room to spare)",
    )


def serving_setup(a, need_draft: bool = True) -> tuple[Path, Path | None, list[str]]:
    """(target, draft, the server flags every server shares) from add_serving_args' flags."""
    from gpu_helpers import defaults_refused, server_args

    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_target

    model = Path(a.model) if a.model else ensure_target("kimi-width-predictable")
    draft = Path(a.draft) if a.draft else (make_draft(model) if need_draft else None)
    # Three Kimi-width servers (16 GB target + 2.6 GB draft each) side by side: the fraction only has to pass
    # SGLang's floor (weights / memory free at start-up) for the last one, the KV cap keeps each server small
    # (SGLang 0.5.16 otherwise gave one EAGLE-3 server 75 GB of KV at fraction 0.3 and the next one failed)
    frac = knobs.get("SGE3_MEM_FRACTION", "0.5")
    common = [
        "--model-path",
        str(model),
        *server_args(a.attention_backend),
        "--mem-fraction-static",
        frac,
        "--max-total-tokens",
        str(a.max_total_tokens),
    ]
    if defaults_refused(model, a.attention_backend):  # every server alike: the dump needs eager prefill here
        common.append("--disable-prefill-cuda-graph")
    return model, draft, common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_serving_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--only",
        default="spec,base,dump,specdump",
        help="groups to run: spec, base, dump (needs base), specdump (needs spec)",
    )
    a = ap.parse_args()
    only = [g for g in a.only.split(",") if g]
    if "dump" in only and "base" not in only:
        raise SystemExit("--only dump needs base too (dump_on is compared with base_on)")
    tmp = Path(tempfile.mkdtemp(prefix="sge3_bench_serve_"))
    model, draft, common = serving_setup(a, need_draft="spec" in only)
    res = {
        "model": str(model),
        "draft": str(draft),
        "attention_backend": a.attention_backend,
        "cuda_graphs": "on",
        "new_tokens": a.new_tokens,
        "rounds": {},
        "sglang": __import__("importlib.metadata").metadata.version("sglang"),
    }
    if draft is not None:
        res["draft_eagle_config"] = check_draft(draft)
    dump_dir = tmp / "dump"
    dump_dir.mkdir()
    envs = server_envs(tmp, dump_dir)
    res["server_args"] = common

    def args_for(name):
        return (
            [*common, "--speculative-draft-model-path", str(draft), *SPEC_ARGS]
            if name.startswith("spec")
            else list(common)
        )

    # fresh prompts for every workload (no radix-cache hit between them), the same for every server
    prompts = {
        bs: {
            "warm": prompts_for(bs, 2 if bs == 1 else 1, 1000 * bs + 999),
            "rounds": [prompts_for(bs, 3 if bs == 1 else 2, 1000 * bs + r) for r in range(a.rounds)],
        }
        for bs in (1, 16)
    }
    if "spec" in only:
        run_group(
            list(GROUPS["spec"]) + (list(GROUPS["specdump"]) if "specdump" in only else []),
            args_for,
            envs,
            a,
            prompts,
            res,
        )
    if "base" in only:
        names = list(GROUPS["base"]) + (list(GROUPS["dump"]) if "dump" in only else [])
        run_group(names, args_for, envs, a, prompts, res)
    summary = {}
    for on, off in RATIOS:
        for bs in (1, 16):
            x, y = res["rounds"].get(f"{on}_bs{bs}"), res["rounds"].get(f"{off}_bs{bs}")
            if x and y:
                per_round = sorted(p / q for p, q in zip(x, y))
                summary[f"{on}/{off} bs{bs}"] = round(statistics.median(per_round), 4)
                res[f"ratio_{on}_over_{off}_bs{bs}_rounds"] = [round(v, 4) for v in per_round]
    outs = res.pop("outputs", {})
    for bs in (1, 16):
        if f"spec_on_bs{bs}" in outs:
            same = outs[f"spec_on_bs{bs}"] == outs[f"spec_off_bs{bs}"]
            acc = {k: round(statistics.mean(v), 3) for k, v in res.get("accept", {}).items() if k.endswith(f"bs{bs}")}
            res[f"spec_bs{bs}_greedy_identical"], res[f"spec_bs{bs}_accept_length"] = same, acc
    res.pop("accept", None)
    res["ratios"] = summary
    print(json.dumps(res, indent=2))
    for k, v in summary.items():
        print(f"{k}: {v:.4f}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_serve.json").write_text(json.dumps(res, indent=2))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)  # the dumped samples


if __name__ == "__main__":
    main()
