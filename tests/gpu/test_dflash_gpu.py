"""DFlash drafts on a real SGLang server (GPU host; SGLang 0.5.16, decode CUDA graphs on).

- test_dflash_serves_greedy_equal: SGLang's own DFLASH worker serves the tiny DeepSeek-V3 target with a random
  DFlash draft in SGLang's layout through our launcher (strict loader on): greedy outputs as the target alone's,
  except where the target itself hesitates. DFLASH verifies a whole block in one extend pass, the target alone
  decodes one token at a time; in bf16 the two may round a near-tie of the random target's logits apart, after
  which the texts differ. So each output is equal, or at its first split both tokens are within NEAR_TIE of the
  target's best log-probability there (asked of the target alone: its TOP_K log-probabilities at that
  position, in a prefill, which may itself round the tie either way); the figures record full equality and
  every split. A draft with one tensor saved under another name is served by plain SGLang (the tensor
  left at its initial value, nothing said) and refused by ours, naming it.
- test_dflash_roundtrip: on the round trip's preparation (SGE3_RT_DIR: the predictable tiny target, its dump of
  HF hidden states [1, 2, 3] exported for speculators, the EAGLE-3 draft trained and converted from it), a DFlash
  draft trained on the same export (target layers 0, 1, 2: the same states), converted and checked; both drafts
  benched against the target alone on the held-out prompts: greedy outputs identical, accept lengths and speedups
  in $OUT/dflash_roundtrip.json; DFlash's accept length >= EAGLE-3's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_helpers import BASE_ARGS, LOG_DIR, activation_env, generate, http_json, sglang_server
from gpu_helpers import free_port as _port

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("serve_backend")]
PROMPTS = [[(7 * i + 3 * j) % 4000 + 10 for j in range(24)] for i in range(6)]
BLOCK = 8
NEAR_TIE = 0.25  # nats below the target's best log-probability that bf16 kernels may round a choice apart
TOP_K = 8  # the target's best choices asked at a split (a random target ties several at bf16 resolution)


def _random_dflash_draft(out: Path, target: Path, *, rename: dict | None = None) -> Path:
    """A random DFlash draft in SGLang's layout for `target` (K = 2 target layers)."""
    import torch
    from safetensors.torch import save_file

    t = json.loads((target / "config.json").read_text())
    H, heads, kv, hd, inter = t["hidden_size"], 8, 2, 128, 2048
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": H,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "intermediate_size": inter,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "vocab_size": t["vocab_size"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "block_size": BLOCK,
        "dflash_config": {
            "block_size": BLOCK,
            "target_layer_ids": [1, 2],
            "mask_token_id": t["vocab_size"] - 1,
            "num_target_layers": t["num_hidden_layers"],
        },
    }
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    p = "layers.0."
    tensors = {
        p + "self_attn.q_proj.weight": w(heads * hd, H),
        p + "self_attn.k_proj.weight": w(kv * hd, H),
        p + "self_attn.v_proj.weight": w(kv * hd, H),
        p + "self_attn.o_proj.weight": w(H, heads * hd),
        p + "self_attn.q_norm.weight": torch.ones(hd, dtype=torch.bfloat16),
        p + "self_attn.k_norm.weight": torch.ones(hd, dtype=torch.bfloat16),
        p + "mlp.gate_proj.weight": w(inter, H),
        p + "mlp.up_proj.weight": w(inter, H),
        p + "mlp.down_proj.weight": w(H, inter),
        p + "input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
        p + "post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
        "fc.weight": w(H, 2 * H),
        "hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16),
        "norm.weight": torch.ones(H, dtype=torch.bfloat16),
    }
    for old, new in (rename or {}).items():
        tensors[new] = tensors.pop(old)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    save_file(tensors, str(out / "model.safetensors"))
    return out


def _accept(base: str):
    info = http_json(base + "/get_server_info")
    return [s.get("avg_spec_accept_length") for s in info.get("internal_states", [info])][0]


def _agreed(a: list[int], b: list[int]) -> int:
    """How many leading tokens two outputs share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _outputs(base: str) -> list[list[int]]:
    return [generate(base, ids, max_new_tokens=48)["output_ids"] for ids in PROMPTS]


def _dflash_args(target: Path, draft: Path) -> list[str]:
    return [
        "--model-path",
        str(target),
        *BASE_ARGS,
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        str(draft),
    ]


def test_dflash_serves_greedy_equal(tiny_target, tmp_path):
    target = Path(tiny_target)
    draft = _random_dflash_draft(tmp_path / "dflash", target)
    env = activation_env(tmp_path)
    with sglang_server(
        _dflash_args(target, draft), name="dflash_plain", port=_port(), launcher="sglang.launch_server", env=env
    ) as (base, log, _):
        served = _outputs(base)
        accept = _accept(base)
    strict = [ln for ln in log.read_text().splitlines() if "DFlash draft" in ln and "tensors loaded" in ln]
    with sglang_server(["--model-path", str(target), *BASE_ARGS], name="dflash_target_alone", port=_port()) as (
        base,
        _,
        _,
    ):
        alone = _outputs(base)
        splits = [_split(base, ids, s, a) for ids, s, a in zip(PROMPTS, served, alone)]
    fig = {"accept_length": accept, "greedy_equal": served == alone, "block_size": BLOCK, "draft": "random"}
    fig["splits"] = splits
    fig["strict_load"] = strict[0][-300:] if strict else None
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "dflash_serve.json").write_text(json.dumps(fig, indent=2))
    print("DFLASH", fig)
    assert [len(s) for s in served] == [len(a) for a in alone], (served, alone)
    far = [
        sp
        for sp in splits
        if sp and not all(b is not None and b <= NEAR_TIE for b in sp["behind_target_best"].values())
    ]
    assert not far, (far, served, alone)
    assert accept is not None and accept >= 1.0
    assert strict, "the strict loader did not run on the DFlash draft"


def _split(base: str, prompt: list[int], served: list[int], alone: list[int]) -> dict | None:
    """Where `served` first leaves the target alone's output: how far each of the two tokens there is below the
    target's best log-probability (None: not among its TOP_K; no split: None)."""
    at = _agreed(served, alone)
    if at >= min(len(served), len(alone)):
        return None
    reply = generate(base, prompt + alone[:at], max_new_tokens=1, return_logprob=True, top_logprobs_num=TOP_K)
    top = {tok: lp for lp, tok, *_ in reply["meta_info"]["output_top_logprobs"][0]}
    best = max(top.values())
    behind = {
        name: round(best - top[t], 4) if t in top else None
        for name, t in (("alone", alone[at]), ("served", served[at]))
    }
    return {"at": at, "alone": alone[at], "served": served[at], "behind_target_best": behind}


def test_dflash_renamed_tensor_silent_in_sglang_refused_by_ours(tiny_target, tmp_path):
    target = Path(tiny_target)
    bad = _random_dflash_draft(
        tmp_path / "renamed",
        target,
        rename={"layers.0.self_attn.q_norm.weight": "layers.0.self_attn.query_norm.weight"},
    )
    with sglang_server(
        _dflash_args(target, bad), name="dflash_renamed_plain", port=_port(), launcher="sglang.launch_server"
    ) as (base, _, _):
        assert generate(base, PROMPTS[0], max_new_tokens=8)["output_ids"]  # served, nothing said
    env = activation_env(tmp_path)
    with pytest.raises(RuntimeError, match="query_norm"):
        with sglang_server(_dflash_args(target, bad), name="dflash_renamed_ours", port=_port(), env=env, timeout=300):
            pass


def _rt_run(cmd: list[str], name: str, timeout: float = 900):
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", *cmd], capture_output=True, text=True, timeout=timeout, env=os.environ)
    (LOG_DIR / f"dflash_{name}.log").write_text(f"$ {' '.join(cmd)}\n# rc={p.returncode}\n{p.stdout}\n{p.stderr}")
    assert p.returncode == 0, f"{name}: {p.stderr[-3000:]}"
    return p


def _bench(url: str, base: str, prompts: Path, name: str, conc: int, n_new: int) -> dict:
    out = LOG_DIR / f"dflash_bench_{name}.json"
    cmd = ["sglang_eagle3_ext.bench", "--url", url, "--baseline-url", base, "--prompts", str(prompts)]
    _rt_run([*cmd, "--max-new-tokens", "8", "--concurrency", str(conc)], f"bench_warm_{name}")
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", *cmd, "--max-new-tokens", str(n_new), "--concurrency", str(conc), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    res = json.loads(out.read_text())
    res["rc"] = p.returncode
    return res


def test_dflash_roundtrip():
    import knobs

    work = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent")
    target, hs, eagle = work / "target", work / "hs", work / "draft_sglang"
    if not (eagle / "config.json").exists():
        pytest.skip("needs the tiny round trip prepared in $SGE3_RT_DIR (test_roundtrip_gpu with SGE3_RT_PREPARE_ONLY)")
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    spec_out, draft = work / "dflash_trained", work / "dflash_sglang"
    if not (spec_out / "config.json").exists():
        epochs = knobs.get("SGE3_DFLASH_EPOCHS")
        _rt_run(
            [
                "sglang_eagle3_ext.train_draft",
                "--draft-arch",
                "dflash",
                "--data",
                str(hs),
                "--target",
                str(target),
                "--out",
                str(spec_out),
                "--device",
                "cuda",
                "--block-size",
                str(BLOCK),
                "--mask-token-id",
                str(vocab - 1),
                "--epochs",
                epochs,
                "--lr",
                knobs.get("SGE3_DFLASH_LR"),
                "--loss-impl",
                "eager",
            ],
            "train",
        )
    if not (draft / "config.json").exists():  # train saves speculators' format: convert to SGLang's
        _rt_run(["sglang_eagle3_ext.convert", str(spec_out), str(draft)], "convert")
    _rt_run(["sglang_eagle3_ext.check", str(draft), "--target", str(target), "--scan-values"], "check")
    from sglang_eagle3_ext.server.started import eagle3_chain_args

    env = activation_env(work)
    common = [
        "--preset",
        "tiny",
        "--model-path",
        str(target),
        "--cuda-graph-max-bs",
        "16",
        "--decode-log-interval",
        "5",
    ]
    held = work / "heldout.jsonl"
    fig: dict = {"block_size": BLOCK, "sglang": __import__("importlib.metadata").metadata.version("sglang")}
    with sglang_server(common, name="dflash_rt_base", port=_port(), env=env) as (base, _, _):
        for algo, args in (
            ("dflash", ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", str(draft)]),
            ("eagle3", ["--speculative-draft-model-path", str(eagle), *eagle3_chain_args(3)]),
        ):
            with sglang_server([*common, *args], name=f"dflash_rt_{algo}", port=_port(), env=env) as (url, _, _):
                levels = [int(c) for c in knobs.get("SGE3_DFLASH_LEVELS").split(",")]
                fig[algo] = {f"c{c}": _bench(url, base, held, f"{algo}_c{c}", c, 64) for c in levels}
    (LOG_DIR / "dflash_roundtrip.json").write_text(json.dumps(fig, indent=2))
    for algo in ("dflash", "eagle3"):
        for lv, res in fig[algo].items():
            print(
                f"dflash round trip [{algo} {lv}]: accept length {res['spec']['accept_length']:.2f}, "
                f"speedup {res.get('speedup') or 0:.2f}x, {res['verdict']}"
            )
            assert "greedy outputs identical" in res["verdict"], (algo, lv, res["verdict"])
    d, e = fig["dflash"]["c1"]["spec"]["accept_length"], fig["eagle3"]["c1"]["spec"]["accept_length"]
    assert d >= e, f"DFlash accept length {d:.2f} < EAGLE-3's {e:.2f} on the same dump"
