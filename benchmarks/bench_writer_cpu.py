"""CPU benchmark: what the dump writer's threads take from the thread that shares their process.

    python benchmarks/bench_writer_cpu.py [--samples 48] [--tokens 2048] [--hidden 1024] [--io-threads 8]

In SGLang the writer's threads live in the scheduler process, whose forward thread is Python-bound
(GIL). This runs a pure-Python stand-in for that thread and measures its loop rate alone, then while
the real DumpWriter writes --samples prompts (tiny-preset sizes by default: 3 aux + 2 finals, bf16),
with our direct safetensors writer, with safetensors.torch.save_file, and with our writer in a child
process (SGLANG_EAGLE3_EXT_DUMP_WRITER=process: no GIL shared with the stand-in), and prints
  forward_ratio = stand-in loop rate while writing ÷ alone          (goal: near 1)
  writer_over_disk = writer bytes/s ÷ sequential fsynced disk bytes/s, same run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def spin(stop: threading.Event, out: list) -> None:
    n, t0 = 0, time.perf_counter()
    while not stop.is_set():
        for _ in range(1000):  # bytecode-bound, like a scheduler loop
            n += 1
    out.append(n / (time.perf_counter() - t0))


@contextlib.contextmanager
def spinning():
    """Runs the stand-in thread for the block; the list holds its loop rate afterwards."""
    stop, out = threading.Event(), []
    t = threading.Thread(target=spin, args=(stop, out))
    t.start()
    try:
        yield out
    finally:
        stop.set()
        t.join()


def loop_rate(seconds: float) -> float:
    with spinning() as out:
        time.sleep(seconds)
    return out[0]


def run_writer(a, root: Path, use_save_file: bool, process: bool = False) -> dict:
    import torch

    import sglang_eagle3_ext.dump.sample_file as F
    from sglang_eagle3_ext import envs
    from sglang_eagle3_ext.dump import config as C
    from sglang_eagle3_ext.dump.manifest import read_manifest
    from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
    from sglang_eagle3_ext.in_server.dump.copy import rows_finite as _rows_finite
    from sglang_eagle3_ext.in_server.dump.staging import region_size
    from sglang_eagle3_ext.in_server.dump.start import make_writer

    real = F.save_safetensors
    if use_save_file:
        from safetensors.torch import save_file

        def via_save_file(p, t, m, fsync=False):  # the previous writer: safetensors' own serializer
            save_file({k: v.contiguous() for k, v in t.items()}, str(p), metadata=m)  # None: atomic_write fsyncs

        F.save_safetensors = via_save_file
    try:
        cfg = C.from_env(
            {
                envs.DUMP_DIR: str(root),
                C.ENV_LAYERS: "1,2,3",
                C.ENV_FINAL: "both",
                C.ENV_IO_THREADS: str(a.io_threads),
                C.ENV_MIN_TOKENS: "1",
                C.ENV_WRITER: "process" if process else "thread",
            }
        )
        meta = {
            "layer_indices_hf": [1, 2, 3],
            "hidden_size": a.hidden,
            "num_hidden_layers": 4,
            "architecture": "DeepseekV3ForCausalLM",
            "final": "both",
            "dtype": "bfloat16",
        }
        T, H = a.tokens, a.hidden
        src = [torch.randn(T, 5 * H).bfloat16() for _ in range(4)]  # reused contents, fresh batches
        ok = [_rows_finite([s]) for s in src]  # as the capture computes them
        w = make_writer(cfg, meta, "dp0")
        ring = w.staging if process else None
        with spinning() as out:
            t0 = time.perf_counter()
            for i in range(a.samples):
                s = src[i % 4]
                nb = s.numel() * 2 + T * 8
                w.reserve(nb)
                host = {
                    "ids": torch.arange(T),
                    "aux": s[:, : 3 * H],
                    "pre": s[:, 3 * H : 4 * H],
                    "post": s[:, 4 * H :],
                    "ok": ok[i % 4],
                }
                region = None
                if ring is not None:  # as the capture does: the host copies land in the shared memory
                    specs = [(tuple(t.shape), t.dtype) for t in host.values()]
                    region = ring.alloc(region_size(specs))
                    dst = (
                        ring.tensors(region, specs)
                        if region
                        else list(w.host_buffers(dict(zip(host, specs)), False).values())
                    )
                    host = {k: d.copy_(t) for (k, t), d in zip(host.items(), dst)}
                else:
                    host = {k: t.contiguous() for k, t in host.items()}
                b = ChunkBatch(
                    [f"s{i}"],
                    [0],
                    [T],
                    [T],
                    host["ids"],
                    host["aux"],
                    "packed",
                    host["pre"],
                    host["post"],
                    None,
                    nb,
                    row_ok=host["ok"],
                )
                if region is not None:
                    b.free_host = lambda r=region: ring.free(r)
                w.submit(b)
            assert w.flush(600)
            dt = time.perf_counter() - t0
        w.close()
        man = read_manifest(root)
        assert len(man) == a.samples
        return {"loop_rate": out[0], "writer_bytes_s": sum(r["bytes"] for r in man.values()) / dt}
    finally:
        F.save_safetensors = real


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--io-threads", type=int, default=8)
    ap.add_argument("--dir", help="where to write (default: a temp dir)")
    a = ap.parse_args()
    from bench_dump import disk_write_bps

    base = Path(a.dir or tempfile.mkdtemp(prefix="sge3_bench_writer_"))
    res = {"loop_rate_alone": loop_rate(2.0)}
    for name, sf, proc in (("ours", False, False), ("save_file", True, False), ("process", False, True)):
        d = base / name
        d.mkdir(parents=True, exist_ok=True)
        r = run_writer(a, d, sf, proc)
        res[f"{name}_forward_ratio"] = r["loop_rate"] / res["loop_rate_alone"]
        res[f"{name}_writer_bytes_s"] = r["writer_bytes_s"]
    res["disk_seq_write_bytes_s"] = disk_write_bps(base)
    for name in ("ours", "save_file", "process"):
        res[f"{name}_writer_over_disk"] = res[f"{name}_writer_bytes_s"] / res["disk_seq_write_bytes_s"]
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
