"""GPU benchmark: cost of dumping on prefill, and how close the writer gets to the disk.

    python benchmarks/bench_dump.py [--model DIR] [--dump-dir DIR] [--prompts 64] [--len 2048]

Runs the same server twice (dump off, dump on; --disable-radix-cache both times), sends --rounds
bursts of --prompts prompts of --len tokens with max_new_tokens=1 at --concurrency (the writer
drains between bursts, off the clock, so the disk is not the limit of the prefill figure), and prints
  prefill_ratio = prefill tokens/s with dump ÷ without
  writer_ratio  = writer bytes/s (manifest bytes / (sending + draining time)) ÷ the disk's
                  sequential write bytes/s (1 GiB, fsynced, in the dump dir, measured in this run)
  sustained_need_over_disk = bytes/s that dumping at the "off" prefill rate needs ÷ disk bytes/s
                  (above 1, sustained dumping is disk-bound whatever the writer does).
With --specforge it then runs SpecForge's own offline capture (scripts/prepare_hidden_states.py of
specforge==0.2.0, see specforge_capture.py) on the same model and prompts, and prints
  specforge tokens/s, ours tokens/s (prefill_tok_s_on), ratio ours/specforge
both clocks leaving out the warm-up (our first request; SpecForge's first batch) and model load.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "gpu"))


def disk_write_bps(d: Path, total=1 << 30, block=64 << 20) -> float:
    buf = os.urandom(block)
    p = d / ".bench_seq_write"
    t0 = time.perf_counter()
    with open(p, "wb") as fh:
        for _ in range(total // block):
            fh.write(buf)
        fh.flush()
        os.fsync(fh.fileno())
    dt = time.perf_counter() - t0
    p.unlink()
    return total / dt


def _writer_status(d: Path) -> dict:
    """The writer's own counters (status/*.json) after the server closed, e.g. staging_fallbacks."""
    return {p.stem: json.loads(p.read_text()).get("stats") for p in sorted((d / "status").glob("*.json"))}


def drive(base, prompts, concurrency, rid_prefix, rounds=1, between=None):
    """Warm up with prompt 0, then send prompts 1.. `rounds` times (fresh rids each round); returns
    the seconds spent sending. between(round) runs after each round, off the clock: the dump
    bench drains the writer there, so every round is a burst that fits the host budget and the
    prefill figure measures the dump's cost to the forward pass, not the disk."""
    from gpu_helpers import http_json

    def one(rid, i):
        http_json(base + "/generate", {"input_ids": prompts[i], "rid": rid,
                                       "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    one(f"{rid_prefix}warm", 0)  # warm-up (Triton JIT)
    busy = 0.0
    for r in range(rounds):
        t = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as ex:
            list(ex.map(lambda i: one(f"{rid_prefix}{r}-{i}", i), range(1, len(prompts))))
        busy += time.perf_counter() - t
        if between is not None:
            between(r)
    return busy


def specforge_vs_ours(a, model, prompts, res):
    """SpecForge's capture on the same model and prompts; a failure is recorded, our numbers are kept."""
    from specforge_capture import run_specforge_capture

    out = Path(tempfile.mkdtemp(prefix="sge3_bench_specforge_")) / "out"
    try:
        sf = run_specforge_capture(model, prompts, out, a.specforge_script, timeout=1800,
                                   batch_size=a.specforge_batch_size or a.concurrency,
                                   mem_fraction=float(os.environ.get("SGE3_MEM_FRACTION", 0.3)))
    except Exception as e:  # noqa: BLE001 -- reported in the JSON, the run's own numbers still print
        res["specforge_error"] = f"{type(e).__name__}: {e}"[-4000:]
        return
    res["specforge"] = sf
    res["specforge_tok_s"] = sf["tokens_per_s"]
    res["ours_tok_s"] = res["prefill_tok_s_on"]
    res["ratio_ours_over_specforge"] = res["ours_tok_s"] / res["specforge_tok_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--dump-dir")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4, help="bursts of --prompts; the writer drains between "
                    "them off the clock (each burst must fit SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB)")
    ap.add_argument("--compute-stream", action="store_true",
                    help="also dump with the copies on the compute stream (SGLANG_EAGLE3_EXT_DUMP_COPY_STREAM=0)")
    ap.add_argument("--specforge", action="store_true", help="also time SpecForge's prepare_hidden_states.py")
    ap.add_argument("--specforge-script", help="its path (default: $SGE3_SPECFORGE_SCRIPT, else the vendored copy)")
    ap.add_argument("--specforge-batch-size", type=int, help="prompts per SpecForge forward (default: --concurrency)")
    a = ap.parse_args()
    import torch
    from gpu_helpers import BASE_ARGS, free_port as _port, sglang_server
    from test_dump_gpu import _activation_env

    from sglang_eagle3_ext.dump.config import ENV_COPY_STREAM
    from sglang_eagle3_ext.dump.manifest import read_manifest
    from sglang_eagle3_ext.tiny import ensure_tiny_target

    model = a.model or str(ensure_tiny_target())
    dump = Path(a.dump_dir or tempfile.mkdtemp(prefix="sge3_bench_dump_"))
    dump.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 4000, (a.len,), generator=g).tolist() for _ in range(a.prompts)]
    args = ["--model-path", model, *BASE_ARGS, "--disable-radix-cache", "--context-length", str(a.len + 64)]
    from sglang_eagle3_ext.dump.config import ENV_DIR, ENV_IO_THREADS, META_FILE

    res = {"io_threads": os.environ.get(ENV_IO_THREADS) or "default"}
    tmp = Path(tempfile.mkdtemp())

    def prefill_tok_s(name, env, rid_prefix, between=None):
        """Serve, drive the prompts, return tokens/s (the warm-up prompt excluded)."""
        with sglang_server(args, name=name, port=_port(), env=env, launcher="sglang.launch_server") as (b, _, _p):
            d = env.get(ENV_DIR)
            if d and not Path(d, META_FILE).exists():   # the writer writes it at model init
                raise SystemExit(f"{name}: dumping did not start in the server (no {META_FILE} in {d}): the "
                                 f"activation did not reach it; see its log")
            dt = drive(b, prompts, a.concurrency, rid_prefix, a.rounds, between)
        tok_s = a.rounds * (len(prompts) - 1) * a.len / dt
        print(f"{name}: {tok_s:.0f} prefill tokens/s", flush=True)   # shown even if a later phase fails
        return tok_s

    drain = {"s": 0.0}

    def drainer(d: Path, prefix: str):
        def wait_written(r):
            """Off the prefill clock: wait until round r's samples are listed in d's manifest."""
            t0, want = time.perf_counter(), {f"{prefix}{r}-{i}" for i in range(1, len(prompts))}
            while not want <= set(read_manifest(d)):
                if time.perf_counter() - t0 > 600:
                    raise SystemExit("writer did not finish in 600 s")
                time.sleep(0.02)
            if d == dump:
                drain["s"] += time.perf_counter() - t0
        return wait_written

    off_env = {k: v for k, v in _activation_env(tmp, dump).items() if not k.startswith("SGLANG_EAGLE3_EXT_DUMP")}
    res["prefill_tok_s_off"] = prefill_tok_s("bench_dump_off", off_env, "off-")
    res["prefill_tok_s_on"] = prefill_tok_s("bench_dump_on", _activation_env(tmp, dump), "on-",
                                            drainer(dump, "on-"))
    res["writer_status_on"] = _writer_status(dump)   # staging ring size and fallbacks, skips: what the run used
    ours = [m for k, m in read_manifest(dump).items() if k.startswith("on-") and not k.endswith("warm")]
    send_s = a.rounds * (len(prompts) - 1) * a.len / res["prefill_tok_s_on"]
    res["writer_bytes_s"] = sum(m["bytes"] for m in ours) / (send_s + drain["s"])
    res["dump_bytes_per_token"] = sum(m["bytes"] for m in ours) / sum(m["num_tokens"] for m in ours)
    res["disk_seq_write_bytes_s"] = disk_write_bps(dump)
    res["prefill_ratio_on_over_off"] = res["prefill_tok_s_on"] / res["prefill_tok_s_off"]
    res["writer_over_disk_ratio"] = res["writer_bytes_s"] / res["disk_seq_write_bytes_s"]
    # Sustained dumping at the "off" prefill rate would need this many bytes/s: above 1, the disk (not
    # the dump) sets the pace once the host budget is full, whatever the writer does.
    res["sustained_need_over_disk"] = (res["prefill_tok_s_off"] * res["dump_bytes_per_token"]
                                       / res["disk_seq_write_bytes_s"])
    if a.compute_stream:  # what the side copy stream buys: same run, copies queued behind the forward
        d2 = Path(tempfile.mkdtemp(prefix="sge3_bench_dump_cs_"))
        res["prefill_tok_s_on_compute_stream"] = prefill_tok_s(
            "bench_dump_on_compute_stream", {**_activation_env(tmp, d2), ENV_COPY_STREAM: "0"}, "cs-",
            drainer(d2, "cs-"))
        res["writer_status_compute_stream"] = _writer_status(d2)
        res["prefill_ratio_compute_stream_over_off"] = res["prefill_tok_s_on_compute_stream"] / res["prefill_tok_s_off"]
    if a.specforge:
        specforge_vs_ours(a, model, prompts, res)
    print(json.dumps(res, indent=2))
    if "ratio_ours_over_specforge" in res:
        print(f"specforge tokens/s: {res['specforge_tok_s']:.0f}\nours tokens/s: {res['ours_tok_s']:.0f}\n"
              f"ratio ours/specforge: {res['ratio_ours_over_specforge']:.3f}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "bench_dump.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
