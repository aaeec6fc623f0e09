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
from ..server.started import stop_group
from . import flags as F

LAUNCHER = "sglang_eagle3_ext.launch_server"
# planning figures (minutes) until the run has timed its own: a Kimi-width server's start with CUDA graph capture,
# and one measurement of every concurrency level on it
START_MIN = 1.5
MEASURE_MIN = 0.5
SERVERS_PER_TIMING_PASS = 3  # target-only + EAGLE-3 at two steps counts
TIMING_STEPS = (1, 3)  # two steps counts give each batch size's intercept and slope
# backends that serve MLA layers only: a Llama-layout draft runs on Triton beside them
MLA_ONLY = ("flashmla", "cutlass_mla", "trtllm_mla")


def min_budget_min(gpus: int = 1) -> float:
    """One timing pass of one backend on servers of `gpus` GPUs each: the least a run can do."""
    return SERVERS_PER_TIMING_PASS * (START_MIN + MEASURE_MIN) * gpus


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
    """SGLang's arguments of one server, spelled as the installed release spells them: CUDA graphs on up to
    max_bs, every iteration logged; an EAGLE-3 server runs max_bs requests at once where SGLang's own cap is
    lower (flags.eagle_max_running) and the user's arguments leave it open."""
    parser = F.sglang_parser()
    extra = list(extra or [])
    fields: dict = {
        "model_path": target,
        "attention_backend": backend,
        "decode_log_interval": 1,
        F.graph_max_bs_field(parser): max(max_bs, 1),
    }
    if steps:
        fields.update(F.chain_fields(steps, draft))
        if backend in MLA_ONLY:
            fields["speculative_draft_attention_backend"] = "triton"
        max_running = max_running or F.eagle_max_running(max_bs, F.user_sets(extra, "max_running_requests", parser))
    if max_running:
        fields["max_running_requests"] = max_running
    return F.spell(fields, parser) + extra


def check_servers(o, backends: list[str], extra: list[str]) -> dict:
    """The servers a run may start (each backend target-only and at the timing steps counts), every command parsed
    by SGLang's own parser (Refused naming --server-args when one does not parse); the GPUs each holds, its
    --tp-size, and the --max-running-requests decision with its reason (None: none made)."""
    parser = F.sglang_parser()
    c = max(o.concurrency)
    cmds = [server_args(o.target, b, c, o.draft, s, extra=extra) for b in backends for s in (0, *TIMING_STEPS)]
    F.check_commands(cmds, parser, o.server_args)
    return {
        "gpus": F.gpus_per_server(cmds[0], parser) if cmds else 1,
        "tp": F.tp_size(cmds[0], parser) if cmds else 1,
        "parsed": parser is not None,
        "max_running": F.running_decision(c, F.user_sets(extra, "max_running_requests", parser)),
    }


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
