"""Preflight: one process per GPU of the TP group all-reduces a small and a large buffer, checks the
sums, and reports bandwidth, before SGLang spends minutes loading a model only to hang at its first
all-reduce (IOMMU/ACS on PCIe boxes, NCCL #1999/#2079).

On a hang or error it retries once with NCCL_P2P_DISABLE=1 (SHM instead of P2P: cheap where SHM is
NCCL's default anyway); if that passes the launch continues with it, else it stops naming host fixes.

Workers are subprocesses (`python -m sglang_eagle3_ext.launch.preflight worker ...`) in their own
process groups, so a hung NCCL kernel can be killed and each attempt gets exactly the env we want.
The worker is any "module:function" (default `allreduce_worker`), so tests inject a hanging one and
run on CPU with the gloo backend.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import envs
from ..boundary import at_least
from ..server.ports import free_port
from .nccl import Decision

DEFAULT_SIZES = (256 << 10, 256 << 20)  # decode-like and prefill-like messages
DEFAULT_TIMEOUT = 120.0
DEFAULT_WORKER = "sglang_eagle3_ext.launch.preflight:allreduce_worker"
P2P_OFF = {"NCCL_P2P_DISABLE": "1"}
IOMMU_FIX = (
    "IOMMU/ACS redirecting PCIe P2P is the usual cause: boot with iommu=pt "
    "(or amd_iommu=off / intel_iommu=off) and disable ACS (BIOS or setpci) on the PCIe switches"
)


@dataclasses.dataclass
class SizeResult:
    nbytes: int
    iters: int
    seconds_per_op: float
    algbw_gbs: float
    busbw_gbs: float


@dataclasses.dataclass
class Attempt:
    label: str
    env_overrides: dict
    status: str  # ok | timeout | error
    seconds: float
    detail: str = ""
    results: list[SizeResult] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class PreflightResult:
    ok: bool
    nprocs: int
    backend: str
    attempts: list[Attempt]
    decisions: list[Decision] = dataclasses.field(default_factory=list)
    message: str = ""

    def report(self) -> str:
        lines = [f"preflight: {self.nprocs} ranks, backend {self.backend}: {'PASSED' if self.ok else 'FAILED'}"]
        for a in self.attempts:
            lines.append(
                f"  attempt [{a.label}]: {a.status} in {a.seconds:.1f}s" + (f" - {a.detail}" if a.detail else "")
            )
            for r in a.results:
                lines.append(
                    f"    all-reduce {_size(r.nbytes):>8}: {r.seconds_per_op * 1e6:10.1f} us  "
                    f"algbw {r.algbw_gbs:8.2f} GB/s  busbw {r.busbw_gbs:8.2f} GB/s  ({r.iters} iters)"
                )
        if self.message:
            lines.append("  " + self.message)
        return "\n".join(lines)


class PreflightFailed(RuntimeError):
    pass


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def dry_run_line(n: int, timeout: float) -> str:
    """What a launch's preflight would do, said by a dry run."""
    return (
        f"preflight: would all-reduce {' and '.join(map(_size, DEFAULT_SIZES))} across {n} GPU(s), "
        f"{timeout:.0f}s per attempt, retried once with NCCL_P2P_DISABLE=1"
    )


def busbw(algbw: float, n: int) -> float:
    """All-reduce bus bandwidth (nccl-tests convention): algbw * 2(n-1)/n."""
    return algbw * 2 * (n - 1) / n


# ---------------------------------------------------------------- worker side


def allreduce_worker(
    rank: int, world_size: int, init_method: str, backend: str, sizes, device_index: int, timeout: float
) -> list[dict]:
    """Default worker: all-reduce each size, check every element, time it. Runs in its own process."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout)
    )
    if backend == "nccl":
        torch.cuda.set_device(device_index)
        device = torch.device("cuda", device_index)
        sync = torch.cuda.synchronize
    else:
        device, sync = torch.device("cpu"), (lambda: None)
    expected = world_size * (world_size + 1) / 2
    out = []
    for nbytes in sizes:
        numel = max(1, nbytes // 4)
        buf = torch.empty(numel, dtype=torch.float32, device=device)

        def check(what: str, buf=buf, nbytes=nbytes, numel=numel):  # this size's buffer
            buf.fill_(rank + 1.0)
            dist.all_reduce(buf)
            sync()
            bad = (buf != expected).sum().item()
            if bad:
                raise RuntimeError(
                    f"rank {rank}: {what} all-reduce of {_size(nbytes)}: {bad}/{numel} wrong sums "
                    f"(expected {expected}, got e.g. {buf[(buf != expected).nonzero()[0]].item()})"
                )

        check("first")
        iters = max(3, min(50, int(2e9 // max(nbytes, 1)))) if backend == "nccl" else 3
        buf.zero_()  # sums stay 0: no overflow however many iterations; speed does not depend on values
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        dt = (time.perf_counter() - t0) / iters
        check("after timing")
        algbw = numel * 4 / dt / 1e9
        out.append(dataclasses.asdict(SizeResult(numel * 4, iters, dt, algbw, busbw(algbw, world_size))))
    dist.barrier()
    dist.destroy_process_group()
    return out


def _worker_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="preflight worker")
    ap.add_argument("--target", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--init-method", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--device-index", type=int, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import importlib

    mod, _, fn = a.target.partition(":")
    worker = getattr(importlib.import_module(mod), fn)
    res = worker(
        a.rank, a.world_size, a.init_method, a.backend, [int(s) for s in a.sizes.split(",")], a.device_index, a.timeout
    )
    Path(a.out).write_text(json.dumps(res))
    return 0


# ---------------------------------------------------------------- launcher side


def _kill(procs) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip()
    except OSError:
        return ""


def run_attempt(
    label: str,
    nprocs: int,
    env: dict,
    *,
    timeout: float,
    worker: str,
    backend: str,
    sizes,
    base_gpu_id: int,
    workdir: Path,
) -> Attempt:
    port = free_port()
    procs, logs, outs = [], [], []
    t0 = time.monotonic()
    for rank in range(nprocs):
        logs.append(workdir / f"{label.replace('=', '_')}.rank{rank}.log")
        outs.append(workdir / f"{label.replace('=', '_')}.rank{rank}.json")
        cmd = [
            sys.executable,
            "-m",
            "sglang_eagle3_ext.launch.preflight",
            "worker",
            "--target",
            worker,
            "--rank",
            str(rank),
            "--world-size",
            str(nprocs),
            "--init-method",
            f"tcp://127.0.0.1:{port}",
            "--backend",
            backend,
            "--sizes",
            ",".join(map(str, sizes)),
            "--device-index",
            str(base_gpu_id + rank),
            "--timeout",
            str(timeout),
            "--out",
            str(outs[-1]),
        ]
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        while True:
            codes = [p.poll() for p in procs]
            elapsed = time.monotonic() - t0
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r = failed[0]
                last = " | ".join(_tail(logs[r]).splitlines()[-3:])[-500:]
                return Attempt(label, {}, "error", elapsed, f"rank {r} exited with {codes[r]}: {last} (log {logs[r]})")
            if all(c == 0 for c in codes):
                results = [SizeResult(**d) for d in json.loads(outs[0].read_text())]
                return Attempt(label, {}, "ok", elapsed, "", results)
            if elapsed > timeout:
                done = sum(c == 0 for c in codes)
                return Attempt(
                    label,
                    {},
                    "timeout",
                    elapsed,
                    f"no result after {timeout:.0f}s ({done}/{nprocs} ranks finished): hang (logs in {workdir})",
                )
            time.sleep(0.1)
    finally:
        _kill(procs)


def run_preflight(
    nprocs: int,
    *,
    env: dict | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    worker: str = DEFAULT_WORKER,
    backend: str = "nccl",
    sizes=DEFAULT_SIZES,
    base_gpu_id: int = 0,
    retry: bool = True,
    host_hints: list[str] | None = None,
    workdir: str | None = None,
) -> PreflightResult:
    """All-reduce check; `timeout` is per attempt (at most two attempts). Never raises for a failed
    check: read `.ok` / `.message`; `.decisions` holds NCCL_P2P_DISABLE=1 when the fallback was needed."""
    env = envs.environ() if env is None else dict(env)
    # the workers import this package; a checkout that is not installed must still be importable
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    wd = Path(workdir or tempfile.mkdtemp(prefix="sge3_preflight_"))
    wd.mkdir(parents=True, exist_ok=True)
    kw = dict(timeout=timeout, worker=worker, backend=backend, sizes=sizes, base_gpu_id=base_gpu_id, workdir=wd)
    first = run_attempt("default", nprocs, env, **kw)
    res = PreflightResult(first.status == "ok", nprocs, backend, [first])
    if res.ok:
        return res
    hints = list(host_hints or [])
    if "NCCL_P2P_DISABLE" in env or not retry:
        why = (
            f"NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']} was set by you, so no retry with it"
            if "NCCL_P2P_DISABLE" in env
            else "retry disabled"
        )
        res.message = _failure_message(first, None, hints, why)
        return res
    second = run_attempt("NCCL_P2P_DISABLE=1", nprocs, {**env, **P2P_OFF}, **kw)
    second.env_overrides = dict(P2P_OFF)
    res.attempts.append(second)
    if second.status == "ok":
        res.ok = True
        reason = f"preflight: default transport {first.status} ({first.detail[:120]}), P2P off passed; {IOMMU_FIX}"
        res.decisions.append(Decision("NCCL_P2P_DISABLE", "1", reason))
        res.message = "continuing with NCCL_P2P_DISABLE=1. " + IOMMU_FIX
        return res
    res.message = _failure_message(first, second, hints, "")
    return res


def _failure_message(first: Attempt, second: Attempt | None, hints: list[str], why: str) -> str:
    parts = [
        f"all-reduce check failed: default {first.status}"
        + (f", with NCCL_P2P_DISABLE=1 {second.status}" if second else "")
        + (f" ({why})" if why else "")
        + "."
    ]
    if first.status == "timeout" or (second and second.status == "timeout"):
        parts.append("Likely host fix: " + IOMMU_FIX + ".")
        parts.append(
            "If it hangs even without P2P: /dev/shm too small for the SHM transport (docker --shm-size=16g "
            "or --ipc=host), or the bootstrap interface (NCCL_SOCKET_IFNAME) is unreachable."
        )
    parts += [h for h in hints if h]
    last = second or first
    if last.status == "error":
        parts.append(f"Last error: {last.detail}")
    return " ".join(parts)


def _sizes(text: str) -> list[int]:
    return [at_least(int, 1)(t) for t in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return _worker_main(argv[1:])
    ap = argparse.ArgumentParser(
        prog="python -m sglang_eagle3_ext.launch.preflight",
        description="All-reduce check across N local GPUs (or CPU ranks with gloo)",
    )
    ap.add_argument("--nprocs", type=at_least(int, 1), required=True)
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--timeout", type=at_least(float, 1e-3), default=DEFAULT_TIMEOUT, help="seconds per attempt")
    ap.add_argument("--sizes", type=_sizes, default=",".join(map(str, DEFAULT_SIZES)), help="bytes, comma-separated")
    ap.add_argument("--base-gpu-id", type=at_least(int, 0), default=0)
    ap.add_argument("--no-retry", action="store_true")
    a = ap.parse_args(argv)
    res = run_preflight(
        a.nprocs, timeout=a.timeout, backend=a.backend, sizes=a.sizes, base_gpu_id=a.base_gpu_id, retry=not a.no_retry
    )
    print(res.report())
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
