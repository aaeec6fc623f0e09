"""All-reduce bandwidth across local GPUs with NCCL's default transport and with P2P off (SHM),
using the launcher's preflight workers. Decode-size to prefill-size messages.

    python benchmarks/bench_preflight.py --nprocs 8 [--timeout 300]
"""

from __future__ import annotations

import argparse
import os

from sglang_eagle3_ext.launch import preflight

SIZES = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nprocs", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    a = ap.parse_args()
    for label, extra in (("default", {}), ("NCCL_P2P_DISABLE=1 (SHM)", {"NCCL_P2P_DISABLE": "1"})):
        res = preflight.run_preflight(
            a.nprocs, env={**os.environ, **extra}, timeout=a.timeout, backend=a.backend, sizes=SIZES, retry=False
        )
        print(f"[{label}]\n{res.report()}\n")


if __name__ == "__main__":
    main()
