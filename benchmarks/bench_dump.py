"""GPU benchmark: cost of dumping on prefill, and how close the writer gets to the disk.

    python benchmarks/bench_dump.py [--model DIR] [--prompts 64] [--len 2048] [--rounds 6] [--discard]

Starts the servers to compare side by side on the same GPU (dump off, dump on; --disable-radix-cache
all), then sends bursts of --prompts prompts of --len tokens (max_new_tokens=1, --concurrency at a time)
to one server at a time, round after round, the order rotating: every round measures every variant
under the same conditions, so drift (clocks, the host's other load) cancels in the per-round ratio.
After a dumping server's burst the writer drains off the clock, so the disk is not the limit of the
prefill figure; the drained samples' files are then deleted (their manifest lines stay), so a long run needs
about one burst of free disk per dumping server. Prints
  prefill_ratio = prefill tokens/s with dump ÷ without (median of the rounds' ratios; the aggregate too)
  writer_ratio  = writer bytes/s (manifest bytes / (sending + draining time)) ÷ the disk's
                  sequential write bytes/s (1 GiB, fsynced, in the dump dir, measured in this run)
  sustained_need_over_disk = bytes/s that dumping at the "off" prefill rate needs ÷ disk bytes/s
                  (above 1, sustained dumping is disk-bound whatever the writer does).
--discard adds a server that captures, copies and stitches but writes nothing
(SGLANG_EAGLE3_EXT_DUMP_DISCARD=1): its ratio is the forward pass's own share of the cost, the rest
is the writer's threads competing with the scheduler. --writer-process adds one whose writer runs in
a child process (SGLANG_EAGLE3_EXT_DUMP_WRITER=process, off the scheduler's GIL); --compute-stream
one with the copies on the compute stream. With --specforge it then runs SpecForge's own offline capture
(scripts/prepare_hidden_states.py of specforge==0.2.0, see specforge_capture.py) on the same model
and prompts, and prints specforge tokens/s, ours tokens/s (prefill_tok_s_on), ratio ours/specforge,
both clocks leaving out the warm-up (our warm-up burst; SpecForge's first batch) and model load.
Every server is warmed with one whole burst (JIT, writer, staging) before the first measured round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
import knobs  # noqa: E402  (tests/gpu/knobs.py: the declared SGE3_* settings)


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


def send(base, prompts, concurrency, rids) -> float:
    """Prefill each prompt once (max_new_tokens=1), `concurrency` in flight; returns the seconds taken."""
    from gpu_helpers import http_json

    def one(rid_prompt):
        rid, ids = rid_prompt
        http_json(
            base + "/generate",
            {"input_ids": ids, "rid": rid, "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
        )

    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(one, zip(rids, prompts)))
    return time.perf_counter() - t


def drop_samples(d: Path, rids) -> None:
    """Delete a drained burst's sample files (their manifest lines stay, with the bytes counted): a
    Kimi-width run writes ~55 GB per dumping server over its rounds, more than a GPU host's free disk."""
    from sglang_eagle3_ext.dump.manifest import read_manifest

    listed = read_manifest(d)
    for rid in rids:
        Path(d, listed[rid]["file"]).unlink(missing_ok=True)


def wait_listed(d: Path, rids, timeout: float = 600) -> float:
    """Wait until every rid is listed in d's manifest; returns the seconds waited."""
    from sglang_eagle3_ext.dump.manifest import read_manifest

    t0, want = time.perf_counter(), set(rids)
    while not want <= set(read_manifest(d)):
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(f"writer did not finish in {timeout:.0f} s")
        skipped = {
            k: v
            for w in _writer_status(d).values()
            for k, v in (w or {}).items()
            if k in ("nonfinite", "refused_other", "refused_prefix_cache") and v
        }
        if skipped:  # those samples will never be listed: say why now rather than after the timeout
            raise SystemExit(f"the writer skipped samples {skipped}; see the server log")
        time.sleep(0.02)
    return time.perf_counter() - t0


def specforge_vs_ours(a, model, prompts, res):
    """SpecForge's capture on the same model and prompts; a failure is recorded, our numbers are kept."""
    from specforge_capture import run_specforge_capture

    out = Path(tempfile.mkdtemp(prefix="sge3_bench_specforge_")) / "out"
    try:
        sf = run_specforge_capture(
            model,
            prompts,
            out,
            a.specforge_script,
            timeout=1800,
            batch_size=a.specforge_batch_size or a.concurrency,
            mem_fraction=float(knobs.get("SGE3_MEM_FRACTION", "0.3")),
        )
    except Exception as e:  # noqa: BLE001 -- reported in the JSON, the run's own numbers still print
        res["specforge_error"] = f"{type(e).__name__}: {e}"[-4000:]
        return
    finally:  # its hidden states (as large as ours) are counted by now; the disk is needed after us
        shutil.rmtree(out.parent, ignore_errors=True)
    res["specforge"] = sf
    res["specforge_tok_s"] = sf["tokens_per_s"]
    res["ours_tok_s"] = res["prefill_tok_s_on"]
    res["ratio_ours_over_specforge"] = res["ours_tok_s"] / res["specforge_tok_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument(
        "--kimi-width",
        action="store_true",
        help="a random DeepSeek-V3 at Kimi-K2.5's width (hidden 7168, 64 heads, MLA ranks 1536/512; "
        "4 layers, 16 experts; ~6 GB, made on first use) instead of the tiny target: the "
        "dump's cost per token against a forward pass of the product's width",
    )
    ap.add_argument("--dump-dir")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="bursts of --prompts per server; the writer drains "
        "after each off the clock (each burst must fit SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB)",
    )
    ap.add_argument(
        "--discard",
        action="store_true",
        help="also a server that captures but writes nothing: the forward pass's share of the cost",
    )
    ap.add_argument(
        "--writer-process",
        action="store_true",
        help="also a server whose writer runs in a child process (SGLANG_EAGLE3_EXT_DUMP_WRITER=process)",
    )
    ap.add_argument(
        "--compute-stream",
        action="store_true",
        help="also dump with the copies on the compute stream (SGLANG_EAGLE3_EXT_DUMP_COPY_STREAM=0)",
    )
    ap.add_argument("--specforge", action="store_true", help="also time SpecForge's prepare_hidden_states.py")
    ap.add_argument("--specforge-script", help="its path (default: $SGE3_SPECFORGE_SCRIPT, else the vendored copy)")
    ap.add_argument("--specforge-batch-size", type=int, help="prompts per SpecForge forward (default: --concurrency)")
    a = ap.parse_args()
    import torch
    from gpu_helpers import BASE_ARGS, sglang_server
    from gpu_helpers import free_port as _port
    from test_dump_gpu import _activation_env

    from sglang_eagle3_ext.dump.config import (
        ENV_COPY_STREAM,
        ENV_DISCARD,
        ENV_IO_THREADS,
        ENV_LAYERS,
        ENV_MAX_PENDING_MB,
        ENV_WRITER,
        META_FILE,
    )
    from sglang_eagle3_ext.dump.manifest import read_manifest
    from sglang_eagle3_ext.envs import DUMP_DIR
    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_target, ensure_tiny_target

    # Kimi-K2.5's attention and widths with 4 layers and 16 experts (tiny.KIMI_WIDTH), drawn on the GPU
    model = a.model or str(ensure_target("kimi-width-deepseek-v3") if a.kimi_width else ensure_tiny_target())
    dump = Path(a.dump_dir or tempfile.mkdtemp(prefix="sge3_bench_dump_"))
    dump.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 4000, (a.len,), generator=g).tolist() for _ in range(a.prompts)]
    # CUDA graphs on (decode); prefill eager on every server alike: the dump refuses to start under prefill
    # graphs (0.5.14's default for DeepSeek-V3; 0.5.16 resolves MLA prefill eager anyway)
    args = [
        "--model-path",
        model,
        *BASE_ARGS,
        "--disable-radix-cache",
        "--context-length",
        str(a.len + 64),
        "--disable-prefill-cuda-graph",
    ]

    res = {"io_threads": os.environ.get(ENV_IO_THREADS) or "default", "rounds": a.rounds}
    tmp = Path(tempfile.mkdtemp())
    on_env = _activation_env(tmp, dump)
    variants = {
        "off": {k: v for k, v in on_env.items() if not k.startswith("SGLANG_EAGLE3_EXT_DUMP")},
        "on": on_env,
    }  # name -> server env
    for name, wanted, var, value in (
        ("discard", a.discard, ENV_DISCARD, "1"),
        ("process", a.writer_process, ENV_WRITER, "process"),
        ("compute_stream", a.compute_stream, ENV_COPY_STREAM, "0"),
    ):
        if wanted:  # dumping with one setting changed, into a dump dir of its own
            variants[name] = _activation_env(tmp, Path(tempfile.mkdtemp(prefix=f"sge3_bench_{name}_")), **{var: value})
    # all servers share the GPU, one at a time under load
    frac = knobs.get("SGE3_MEM_FRACTION") or f"{min(0.3, 0.8 / len(variants)):.2f}"
    args += ["--mem-fraction-static", frac]
    tokens_per_burst = (len(prompts) - 1) * a.len
    cfg = json.loads(Path(model, "config.json").read_text())
    need_mb = tokens_per_burst * (len(on_env[ENV_LAYERS].split(",")) + 2) * cfg["hidden_size"] * 2 * 1.1 / (1 << 20)
    if not os.environ.get(ENV_MAX_PENDING_MB) and need_mb > 4096:  # a burst must fit the host budget
        for env in variants.values():
            if DUMP_DIR in env:
                env[ENV_MAX_PENDING_MB] = str(int(need_mb) + 1)
        print(f"host budget raised to {int(need_mb) + 1} MB so one burst fits ({ENV_MAX_PENDING_MB})", flush=True)
    res["hidden_size"] = cfg["hidden_size"]
    busy = {n: [] for n in variants}
    drain_s = {n: 0.0 for n in variants}
    writes = {n: Path(env[DUMP_DIR]) for n, env in variants.items() if DUMP_DIR in env and ENV_DISCARD not in env}
    with contextlib.ExitStack() as stack:

        def serve(name):
            return stack.enter_context(
                sglang_server(
                    args, name=f"bench_dump_{name}", port=_port(), env=variants[name], launcher="sglang.launch_server"
                )
            )[0]

        # started one after another: SGLang sizes its KV cache from the memory free at start-up, which a
        # server starting beside it is still taking (-> "Loaded weights leave no GPU memory for the KV cache")
        bases = {name: serve(name) for name in variants}  # then served side by side; each stops at exit
        for name, env in variants.items():
            d = env.get(DUMP_DIR)
            if d and not Path(d, META_FILE).exists():  # the writer writes it at model init
                raise SystemExit(
                    f"{name}: dumping did not start in the server (no {META_FILE} in {d}): the "
                    f"activation did not reach it; see its log"
                )
            # warm-up off the clock, a whole burst as the rounds send it: Triton JIT for every batch shape the
            # rounds hit, the writer's threads and staging ring (one prompt was not enough: a Kimi-width run's
            # first round then measured 2.01 beside 0.993-0.997)
            warm = [f"{name}-warm-{i}" for i in range(1, len(prompts))]
            send(bases[name], prompts[1:], a.concurrency, warm)
            if name in writes:
                wait_listed(writes[name], warm)
                drop_samples(writes[name], warm)
        names = list(variants)
        for r in range(a.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rids = [f"{name}-{r}-{i}" for i in range(1, len(prompts))]
                busy[name].append(send(bases[name], prompts[1:], a.concurrency, rids))
                if name in writes:  # off the clock: the burst's samples written before the next burst
                    drain_s[name] += wait_listed(writes[name], rids)
                    drop_samples(writes[name], rids)
            print(
                f"round {r}: " + ", ".join(f"{n} {tokens_per_burst / busy[n][-1]:.0f} tok/s" for n in names), flush=True
            )
    for name in variants:
        res[f"prefill_tok_s_{name}"] = len(busy[name]) * tokens_per_burst / sum(busy[name])
        if name != "off":
            per_round = sorted(o / x for o, x in zip(busy["off"], busy[name]))  # rate ratio = time ratio inverted
            res[f"prefill_ratio_{name}_over_off"] = statistics.median(per_round)
            res[f"prefill_ratio_{name}_over_off_rounds"] = [round(x, 3) for x in per_round]
            res[f"prefill_ratio_{name}_over_off_aggregate"] = res[f"prefill_tok_s_{name}"] / res["prefill_tok_s_off"]
            d = variants[name].get(DUMP_DIR)
            res[f"writer_status_{name}"] = _writer_status(Path(d))  # staging ring, fallbacks, skips
    res["disk_seq_write_bytes_s"] = disk_write_bps(dump)
    for name, d in writes.items():  # "on" keeps the unprefixed keys
        sfx = "" if name == "on" else f"_{name}"
        ours = [m for k, m in read_manifest(d).items() if k.startswith(f"{name}-") and "-warm-" not in k]
        res[f"writer_bytes_s{sfx}"] = sum(m["bytes"] for m in ours) / (sum(busy[name]) + drain_s[name])
        res[f"writer_over_disk_ratio{sfx}"] = res[f"writer_bytes_s{sfx}"] / res["disk_seq_write_bytes_s"]
        if name == "on":
            res["dump_bytes_per_token"] = sum(m["bytes"] for m in ours) / sum(m["num_tokens"] for m in ours)
    # Sustained dumping at the "off" prefill rate would need this many bytes/s: above 1, the disk (not
    # the dump) sets the pace once the host budget is full, whatever the writer does.
    res["sustained_need_over_disk"] = (
        res["prefill_tok_s_off"] * res["dump_bytes_per_token"] / res["disk_seq_write_bytes_s"]
    )
    if a.specforge:
        specforge_vs_ours(a, model, prompts, res)
    print(json.dumps(res, indent=2))
    if "ratio_ours_over_specforge" in res:
        print(
            f"specforge tokens/s: {res['specforge_tok_s']:.0f}\nours tokens/s: {res['ours_tok_s']:.0f}\n"
            f"ratio ours/specforge: {res['ratio_ours_over_specforge']:.3f}"
        )
    out = os.environ.get("OUT")
    if out:
        Path(out, "bench_dump.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
