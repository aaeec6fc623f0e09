"""One SGLang server for the tuning run, started through our launcher (`python -m sglang_eagle3_ext.launch_server`:
the patches, the draft's check before start), logging every decode iteration (`--decode-log-interval 1`, which
bench/steps.py reads), CUDA graphs on; and what the run spends.

The budget counts GPU minutes (wall minutes x GPUs a server holds) from each start until its stop; a step whose
estimate would cross --budget-min is not started (the run reports what it skipped)."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

from .. import envs
from ..boundary import Refused
from ..server.http_client import Server, ServerError
from ..server.ports import free_port
from ..server.started import eagle3_chain_args, stop_group

LAUNCHER = "sglang_eagle3_ext.launch_server"
# planning figures (minutes) until the run has timed its own: a Kimi-width server's start with CUDA graph capture,
# and one measurement of every concurrency level on it
START_MIN = 1.5
MEASURE_MIN = 0.5
SERVERS_PER_TIMING_PASS = 3  # target-only + EAGLE-3 at two steps counts
# backends that serve MLA layers only: a Llama-layout draft runs on Triton beside them
MLA_ONLY = ("flashmla", "cutlass_mla", "trtllm_mla")


def min_budget_min() -> float:
    """One timing pass of one backend: the least a run can do."""
    return SERVERS_PER_TIMING_PASS * (START_MIN + MEASURE_MIN)


@dataclasses.dataclass
class Budget:
    limit_min: float | None
    gpus: int = 1
    spent_gpu_min: float = 0.0
    servers_started: int = 0
    start_min: float = START_MIN
    measure_min: float = MEASURE_MIN
    skipped: list = dataclasses.field(default_factory=list)
    say: object = None

    def server_estimate(self, levels: int = 1) -> float:
        return (self.start_min + self.measure_min * max(levels, 1) / 4) * self.gpus

    def allows(self, what: str, estimate_gpu_min: float) -> bool:
        if self.limit_min is None or self.spent_gpu_min + estimate_gpu_min <= self.limit_min:
            return True
        self.skipped.append(
            f"{what}: ~{estimate_gpu_min:.1f} GPU min would pass --budget-min {self.limit_min:g} "
            f"({self.spent_gpu_min:.1f} spent)"
        )
        if self.say:
            self.say(f"budget: skipped {self.skipped[-1]}")
        return False

    def charge(self, seconds: float, started: bool) -> None:
        self.spent_gpu_min += seconds / 60 * self.gpus
        self.servers_started += started
        if self.say:
            self.say(
                f"spent {self.spent_gpu_min:.1f} GPU min, {self.servers_started} server(s) started"
                + (f" (budget {self.limit_min:g})" if self.limit_min is not None else "")
            )

    def as_dict(self) -> dict:
        return {
            "limit_gpu_min": self.limit_min,
            "spent_gpu_min": round(self.spent_gpu_min, 2),
            "servers_started": self.servers_started,
            "gpus_per_server": self.gpus,
            "skipped": self.skipped,
        }


def server_args(
    target: str,
    backend: str,
    max_bs: int,
    draft: str | None = None,
    steps: int = 0,
    max_running: int | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """SGLang's arguments of one server: CUDA graphs on up to max_bs, every iteration logged."""
    args = [
        "--model-path",
        target,
        "--attention-backend",
        backend,
        "--decode-log-interval",
        "1",
        "--cuda-graph-max-bs",
        str(max(max_bs, 1)),
    ]
    if steps:
        args += eagle3_chain_args(steps, draft)
        if backend in MLA_ONLY:
            args += ["--speculative-draft-attention-backend", "triton"]
    if max_running:
        args += ["--max-running-requests", str(max_running)]
    return args + list(extra or [])


class Started:
    """A running server: url, log file, what its log held when a measurement began."""

    def __init__(self, name: str, url: str, log: Path, proc: subprocess.Popen):
        self.name, self.url, self.log, self.proc = name, url, log, proc

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_offset(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def log_since(self, offset: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")


@contextlib.contextmanager
def started(name: str, args: list[str], log_dir: Path, budget: Budget, wait_s: float = 900.0):
    """Start the launcher with `args` on a free port, wait for /health, yield Started; always stop it and
    charge the budget."""

    port = free_port()
    log = log_dir / f"{name}.log"
    cmd = [sys.executable, "-m", LAUNCHER, *args, "--port", str(port)]
    env = {"SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS": "0", **envs.environ()}
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        srv = Server(url, timeout=10)
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-300:].replace("\n", " | ")
                raise Refused(f"server {name} exited with {proc.returncode} before serving; see {log} ({tail})")
            try:
                srv.get("/health", timeout=5)
                break
            except ServerError:
                if time.monotonic() - t0 > wait_s:
                    raise Refused(f"server {name} not healthy after {wait_s:.0f} s; see {log}") from None
                time.sleep(2)
        if budget.say:
            budget.say(f"server {name} up after {time.monotonic() - t0:.0f} s")
        yield Started(name, url, log, proc)
    finally:
        stop_group(proc)
        budget.charge(time.monotonic() - t0, True)
