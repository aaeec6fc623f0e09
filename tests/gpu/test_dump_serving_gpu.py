"""GPU: dump while serving EAGLE-3 -- the dumped states are, bit for bit, what the draft is fed.

A server runs the tiny target with an EAGLE-3 draft and the dump on (CUDA graphs on: the TARGET_VERIFY
forward replays a graph). Every SGLang process also records the hidden states the draft-extend batches get
(draft_input_recorder.py: `spec_info.hidden_states` of the prefill and decode draft-extends). Then:
1. every written sample is prompt + the request's own output, its metadata splits prefill / verify tokens;
2. every token's aux states equal the draft's input for that token: prompt tokens (EXTEND) and response
   tokens (TARGET_VERIFY, accepted + bonus rows) -- torch.equal, no tolerance;
3. reported (and loosely bounded): per-token cosine of the response states vs a plain dump server's prefill
   of the same prompt+response (verify kernels vs extend kernels), aux layers and both finals.
The draft: the round trip's (SGE3_RT_DIR with a finished tests/gpu/test_roundtrip_gpu.py, accept length > 1)
when there is one, else a random speculators draft converted here (accept length ~1: one row per verify).
~3-4 minutes on an H200 (two server start-ups).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import knobs
import pytest
import torch
from draft_input_recorder import install as recorder_env
from draft_input_recorder import load as load_records
from gpu_helpers import LOG_DIR, REPO, SERVE_BACKEND, activation_env, free_port, generate, http_json, sglang_server
from helpers import cosine
from test_dump_gpu import dump_args

from sglang_eagle3_ext.server.started import eagle3_chain_args

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("serve_backend")]
SPEC_ARGS = eagle3_chain_args(3)
N_REQ, NEW_TOKENS = 8, 48


def _target_and_draft(work: Path) -> tuple[Path, Path, str]:
    rt = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent")
    if (rt / "draft_sglang" / "config.json").exists() and (rt / "target" / ".complete").exists():
        return rt / "target", rt / "draft_sglang", "round trip"
    from sglang_eagle3_ext.tiny.deepseek_v3 import PREDICTABLE, ensure_tiny_target
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    target = ensure_tiny_target(work / "target", **PREDICTABLE)
    cfg = json.loads((target / "config.json").read_text())
    spec = make_speculators_draft(
        work / "draft_spec",
        hidden=cfg["hidden_size"],
        heads=8,
        kv_heads=8,
        vocab=cfg["vocab_size"],
        draft_vocab=cfg["vocab_size"],
        aux_ids=(1, 2, 3),
    )
    draft = work / "draft_sglang"
    p = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.convert", str(spec), str(draft), "--force", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return target, draft, "random"


def _prompts(n: int, seed: int = 5) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(10, 4000, (int(torch.randint(24, 96, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


def _wait_manifest(dump: Path, ids: set, timeout: float = 60) -> dict:
    from sglang_eagle3_ext.dump.manifest import read_manifest

    t0 = time.time()
    while time.time() - t0 < timeout:
        man = read_manifest(dump)
        if ids <= set(man):
            return man
        time.sleep(0.5)
    return read_manifest(dump)


def test_dumped_states_are_what_the_draft_is_fed(tmp_path):
    from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, read_sample

    work = tmp_path
    target, draft, kind = _target_and_draft(work)
    dump, rec_dir = work / "dump", work / "draft_inputs"
    dump.mkdir()
    env = recorder_env(
        work, rec_dir, activation_env(work, SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump), SGLANG_EAGLE3_EXT_DUMP_FINAL="both")
    )
    prompts = _prompts(N_REQ)
    rids = [f"srv{i:03d}" for i in range(N_REQ)]
    t0 = time.time()
    with sglang_server(
        [*dump_args(target, SERVE_BACKEND), "--speculative-draft-model-path", str(draft), *SPEC_ARGS],
        name="dump_serving_eagle3",
        port=free_port(),
        env=env,
        launcher="sglang.launch_server",
    ) as (base, log, _):
        with ThreadPoolExecutor(N_REQ) as ex:  # one batch: verifies of several requests with their own accepts
            outs = list(ex.map(lambda a: generate(base, a[0], NEW_TOKENS, rid=a[1]), zip(prompts, rids)))
        man = _wait_manifest(dump, set(rids))
        info = http_json(base + "/get_server_info")
        text = Path(log).read_text()
    serve_s = time.time() - t0
    assert "response capture OFF" not in text and "DISABLED" not in text, f"see {log}"
    assert set(rids) <= set(man), (sorted(man), f"see {log}")
    accept = [s.get("avg_spec_accept_length") for s in info.get("internal_states", [info])]

    records = load_records(rec_dir)
    fig = {"draft": kind, "server_accept_length": accept, "serve_s": round(serve_s, 1), "samples": {}}
    samples = {}
    for rid, ids, out in zip(rids, prompts, outs):
        t, meta = read_sample(dump / man[rid]["file"])
        samples[rid] = t
        L, P, nv = int(t[T_IDS].shape[0]), meta["prefill_tokens"], meta["verify_tokens"]
        full = ids + list(out["output_ids"])
        # every output token but the last has a state (no verify ran after it), unless the length limit cut
        # the last verify's accepted tokens: then the last one has one too
        assert (
            meta["prompt_len"] == P == len(ids)
            and L == P + nv
            and len(out["output_ids"]) - 1 <= nv <= len(out["output_ids"])
        ), meta
        assert t[T_IDS].tolist() == full[:L]  # 1. prompt + output, up to the last token with a state
        fed = records.get(rid, {})
        missing = [p for p in range(L) if p not in fed]
        assert not missing, (rid, missing[:10])
        want = torch.stack([fed[p][1] for p in range(L)])
        assert [fed[p][0] for p in range(L)] == full[:L], rid
        # 2. bit for bit what the draft-extends were fed: prompt (EXTEND) and response (TARGET_VERIFY) rows
        assert torch.equal(t[T_AUX][:P], want[:P]), (rid, "prompt")
        assert torch.equal(t[T_AUX][P:], want[P:]), (rid, "response")
        fig["samples"][rid] = {"tokens": L, "prefill": P, "verify": nv, "accept_len": meta.get("accept_len")}

    # 3. the same prompt+response prefilled by a plain dump server at the same layers: verify vs extend kernels
    ref_dump = work / "ref_dump"
    ref_dump.mkdir()
    layers = json.loads((dump / "dump_meta.json").read_text())["layer_indices_hf"]
    ref_env = activation_env(
        work,
        SGLANG_EAGLE3_EXT_DUMP_DIR=str(ref_dump),
        SGLANG_EAGLE3_EXT_DUMP_FINAL="both",
        SGLANG_EAGLE3_EXT_DUMP_LAYERS=",".join(map(str, layers)),
    )
    with sglang_server(
        dump_args(target, SERVE_BACKEND),
        name="dump_serving_ref",
        port=free_port(),
        env=ref_env,
        launcher="sglang.launch_server",
    ) as (base, log, _):
        with ThreadPoolExecutor(N_REQ) as ex:
            list(ex.map(lambda r: generate(base, samples[r][T_IDS].tolist(), 1, rid=f"ref{r}"), rids))
        ref_man = _wait_manifest(ref_dump, {f"ref{r}" for r in rids})
    names = [f"aux{li}" for li in layers] + ["prenorm", "postnorm"]
    cos = {"prompt": {n: [] for n in names}, "response": {n: [] for n in names}}
    for rid in rids:
        t, (r, _) = samples[rid], read_sample(ref_dump / ref_man[f"ref{rid}"]["file"])
        assert torch.equal(r[T_IDS], t[T_IDS])
        P = len(prompts[rids.index(rid)])
        K = len(layers)
        a, b = t[T_AUX].view(len(t[T_IDS]), K, -1), r[T_AUX].view(len(t[T_IDS]), K, -1)
        pairs = {f"aux{li}": (a[:, k], b[:, k]) for k, li in enumerate(layers)}
        pairs.update(prenorm=(t[T_PRE], r[T_PRE]), postnorm=(t[T_POST], r[T_POST]))
        for n, (x, y) in pairs.items():
            c = cosine(x, y)
            cos["prompt"][n].append(c[:P])
            cos["response"][n].append(c[P:])
    stats = {
        part: {
            n: {
                "min": round(torch.cat(v).min().item(), 6),
                "mean": round(torch.cat(v).mean().item(), 6),
                "tokens": torch.cat(v).numel(),
            }
            for n, v in d.items()
        }
        for part, d in cos.items()
    }
    fig["cosine_vs_plain_prefill"] = stats
    (LOG_DIR / "dump_serving.json").write_text(json.dumps(fig, indent=2))
    print("\n" + json.dumps(fig, indent=2))
    for n, s in stats["response"].items():
        assert s["mean"] >= 0.99, (n, s)  # same states through other kernels: close, not bit-equal


def test_draft_retrained_on_serving_dump(tmp_path):
    """The round trip, with the training data dumped while serving EAGLE-3 (its draft, CUDA graphs on) instead
    of a plain dump: same train prompts, the server generates the same 96 greedy tokens and writes
    prompt+response, export (loss mask = the response, from the manifest), train_draft with the round trip's
    settings, convert, serve, bench on the round trip's held-out prompts. Its accept length is compared with
    the round trip draft's (bench_tp1.json). Needs a finished round trip in $SGE3_RT_DIR; stages resume from
    $SGE3_SRV_DIR. Prints ratio = accept(serving-dump draft) / accept(plain-dump draft)."""
    from test_roundtrip_gpu import SPEC_ARGS as RT_SPEC
    from test_roundtrip_gpu import _done, _mark, _run

    rt = Path(knobs.get("SGE3_RT_DIR") or "/nonexistent")
    ref = rt / "bench_tp1.json"
    if not ref.exists():
        pytest.skip("needs a finished round trip in $SGE3_RT_DIR (tests/gpu/test_roundtrip_gpu.py)")
    work = Path(knobs.get("SGE3_SRV_DIR") or tmp_path)
    work.mkdir(parents=True, exist_ok=True)
    target, draft = rt / "target", rt / "draft_sglang"
    dump = work / "dump"
    dump.mkdir(exist_ok=True)
    fig: dict = {}
    t = time.time()
    if not _done(dump):
        train = [json.loads(line) for line in (rt / "train.jsonl").read_text().splitlines() if line.strip()]
        env = activation_env(work, SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump))
        with sglang_server(
            [*dump_args(target, SERVE_BACKEND), "--speculative-draft-model-path", str(draft), *RT_SPEC],
            name="srv_dump_server",
            port=free_port(),
            env=env,
            launcher="sglang.launch_server",
        ) as (base, log, _):
            with ThreadPoolExecutor(64) as ex:
                list(ex.map(lambda s: generate(base, s["input_ids"], 96, rid=s["id"]), train))
            man = _wait_manifest(dump, {s["id"] for s in train}, timeout=120)
        assert len(man) == len(train), (len(man), len(train), f"see {log}")
        _mark(dump)
    fig["dump_s"] = round(time.time() - t, 1)
    hs = work / "hs"
    if not _done(hs):
        p = _run(
            ["sglang_eagle3_ext.dump", "export", "--dump-dir", str(dump), "--to", "speculators", "--out", str(hs)],
            "srv_export",
        )
        assert p.returncode == 0, p.stderr[-3000:]
        _mark(hs)
    spec_ckpt, out_draft = work / "draft_speculators", work / "draft_sglang"
    t = time.time()
    if not (spec_ckpt / "config.json").exists():
        p = _run(
            [
                "sglang_eagle3_ext.train_draft",
                "--data",
                str(hs),
                "--target",
                str(target),
                "--out",
                str(spec_ckpt),
                "--device",
                "cuda",
                "--epochs",
                knobs.get("SGE3_RT_EPOCHS", "12"),
                "--lr",
                knobs.get("SGE3_RT_LR", "3e-3"),
                "--loss-impl",
                "eager",
            ],
            "srv_train",
            timeout=900,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        fig["train_summary"] = (p.stdout.strip().splitlines() or [""])[-1]
    fig["train_s"] = round(time.time() - t, 1)
    p = _run(["sglang_eagle3_ext.convert", str(spec_ckpt), str(out_draft), "--force", "--quiet"], "srv_convert")
    assert p.returncode == 0, p.stderr[-3000:]
    out_json = LOG_DIR / "srv_bench.json"
    with sglang_server(
        ["--preset", "tiny", "--model-path", str(target), "--speculative-draft-model-path", str(out_draft), *RT_SPEC],
        name="srv_spec_server",
        port=free_port(),
        env=activation_env(work),
    ) as (spec, _, _):
        p = _run(
            [
                "sglang_eagle3_ext.bench",
                "--url",
                spec,
                "--prompts",
                str(rt / "heldout.jsonl"),
                "--max-new-tokens",
                "64",
                "--concurrency",
                "8",
                "--json",
                str(out_json),
            ],
            "srv_bench",
        )
    a_plain = json.loads(ref.read_text())["spec"]["accept_length"]
    a_srv = json.loads(out_json.read_text())["spec"]["accept_length"]
    fig.update(accept_plain_dump=a_plain, accept_serving_dump=a_srv, ratio=round(a_srv / a_plain, 4))
    (LOG_DIR / "dump_serving_roundtrip.json").write_text(json.dumps(fig, indent=2))
    print("\n" + json.dumps(fig, indent=2))
    assert p.returncode == 0, p.stdout[-3000:]
    assert a_srv >= 0.97 * a_plain, fig  # acceptance: >= the plain dump's draft (3 % training noise allowed)
