"""Helpers shared by the GPU tests: start a real SGLang server, talk to it, reach its spawned workers.

Logs go to $OUT (the device tool's folder) or a temp dir, one file per server.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import knobs

from sglang_eagle3_ext.server.ports import free_port  # noqa: F401 - the GPU tests take it from here
from sglang_eagle3_ext.server.started import stop_group

LOG_DIR = Path(os.environ.get("OUT") or knobs.get("SGE3_LOG_DIR"))
# Served as users serve: decode (and EAGLE-3 draft) CUDA graphs ON, SGLang's prefill-graph rules as
# released. A small capture batch keeps capture quick (~25 s on the tiny target); 16 covers the
# benchmarks' batch 16. Token ids in/out, PyTorch sampling, no grammar (no tokenizer on the host).
COMMON_ARGS = [
    "--skip-tokenizer-init",
    "--sampling-backend",
    "pytorch",
    "--grammar-backend",
    "none",
    "--mem-fraction-static",
    "0.3",
    "--cuda-graph-max-bs",
    "16",
]
# The attention backends the GPU tests run on (SGE3_BACKENDS=triton,flashinfer narrows it). fa3 is
# SGLang's default for MLA targets on Hopper; it is skipped where sgl-kernel lacks its kernels.
BACKENDS = tuple(b for b in knobs.get("SGE3_BACKENDS").split(",") if b)
# the attention backend of the tests that serve one backend (drafts, MLA drafts, dump while serving)
SERVE_BACKEND = knobs.get("SGE3_SERVE_BACKEND")
BASE_ARGS = [*COMMON_ARGS, "--attention-backend", SERVE_BACKEND]


def server_args(backend: str = "triton") -> list[str]:
    """The common serving arguments with one attention backend (CUDA graphs on)."""
    return [*COMMON_ARGS, "--attention-backend", backend]


def backend_missing(backend: str) -> str | None:
    """Why `backend` cannot run here (None: it can). FA3: the import SGLang itself does for it
    (sgl_kernel.flash_attn raises "Can not import FA3 in sgl_kernel" without the flash_ops kernels,
    which a slim SGLang install may leave out: 1.1 GB)."""
    if backend == "fa3":
        try:
            import sgl_kernel.flash_attn  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any failure means SGLang could not use it either
            return f"fa3: {type(e).__name__}: {e}"
    if backend == "flashinfer":
        try:
            import flashinfer  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return f"flashinfer: {type(e).__name__}: {e}"
    return None


def defaults_refused(model, backend: str = "triton") -> str | None:
    """The dump's start-up refusal under this release's defaults (ServerArgs resolved here, on the GPU host,
    as the server will resolve them): 0.5.14 prefills DeepSeek-V3 in tc_piecewise graphs by default;
    0.5.16 switches its breakable default off for MLA targets (None: the dump runs under the defaults)."""
    from sglang.srt.server_args import ServerArgs

    from sglang_eagle3_ext.in_server.dump.prefill_graphs import refusal

    return refusal(ServerArgs(model_path=str(model), skip_tokenizer_init=True, attention_backend=backend))


def eager_prefill_args(model, backend: str = "triton") -> list[str]:
    """For a dumping server: prefill graphs off only where the release would capture them (the dump refuses
    to start there); decode CUDA graphs stay on."""
    return ["--disable-prefill-cuda-graph"] if defaults_refused(model, backend) else []


def decode_graphs_captured(log_text: str) -> bool:
    """The server log shows a finished decode (or EAGLE-3 draft/verify) CUDA-graph capture: SGLang logs
    "Capture <role> <phase> CUDA graph end." (0.5.14, 0.5.16)."""
    return any("CUDA graph end" in line and "prefill" not in line for line in log_text.splitlines())


def http_json(url: str, payload=None, timeout: float = 600):
    """GET (no payload) or POST `payload` as JSON to a full URL, through the package's HTTP client."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    path = u.path + (f"?{u.query}" if u.query else "")
    return _server(f"{u.scheme}://{u.netloc}").request(
        "GET" if payload is None else "POST", path, payload, timeout=timeout
    )


@functools.lru_cache(maxsize=None)
def _server(base: str):
    """One connection pool per server (http_client.Server: bounded waits, one-line errors)."""
    from sglang_eagle3_ext.server.http_client import Server

    return Server(base)


@contextlib.contextmanager
def sglang_server(
    args: list[str],
    *,
    name: str,
    port: int,
    env: dict | None = None,
    launcher: str = "sglang_eagle3_ext.launch_server",
    timeout: float = 600,
    command: list[str] | None = None,
    cwd: Path | None = None,
):
    """Start `python -m launcher args --port PORT`, wait for /health, yield (base_url, log_path, process); always
    stop it. `command`: run exactly `command + args` instead (a user's command line: nothing added, so it must
    serve on `port` by itself), in `cwd`."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{name}.log"
    # a crashed scheduler otherwise keeps the server up 60 s waiting for CUDA coredumps (SGLang 0.5.16)
    full_env = {"SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS": "0", **os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}  # env {NAME: None} unsets NAME
    cmd = [*command, *args] if command else [sys.executable, "-m", launcher, *args, "--port", str(port)]
    if knobs.get("SGE3_MEM_FRACTION") and not command:  # several test servers sharing one GPU (the last flag wins)
        cmd += ["--mem-fraction-static", knobs.get("SGE3_MEM_FRACTION")]
    if knobs.get("SGE3_MAX_TOTAL_TOKENS") and not command:
        # a KV cap: SGLang 0.5.16 sized an EAGLE-3 server's KV (target + draft) at 75 GB under
        # --mem-fraction-static 0.3 on an H200 (the draft's pool is sized apart), leaving no room for the next one
        cmd += ["--max-total-tokens", knobs.get("SGE3_MAX_TOTAL_TOKENS")]
    # One start-up at a time on this host, across test processes: SGLang sizes its KV cache from the memory
    # free when it starts, so a neighbour loading at the same moment left "no GPU memory for the KV cache".
    start_lock = open(knobs.get("SGE3_START_LOCK"), "a")
    fcntl.flock(start_lock, fcntl.LOCK_EX)
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=full_env, start_new_session=True, cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"server {name} exited with {proc.returncode}; see {log}:\n" + log.read_text()[-4000:]
                    )
                try:
                    http_json(base + "/health", timeout=5)
                    break
                except Exception:  # noqa: BLE001 - not answering yet: ask again until the timeout
                    if time.time() - t0 > timeout:
                        raise TimeoutError(f"server {name} not healthy after {timeout}s; see {log}") from None
                    time.sleep(2)
        finally:
            start_lock.close()  # releases the lock
        yield base, log, proc
    finally:
        stop_group(proc, grace_s=30)


def generate(base: str, input_ids, max_new_tokens: int = 32, **extra):
    payload = {
        "input_ids": input_ids,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        **extra,
    }
    return http_json(base + "/generate", payload)


REPO = Path(__file__).resolve().parents[2]
PTH = REPO / "sglang_eagle3_ext" / "_startup" / "sglang_eagle3_ext.pth"


def multi_gpu_tp() -> int:
    """TP size for the multi-GPU tests: $SGE3_TP, else every visible GPU up to 8 (the tiny target's 8 heads
    must divide by it); 0 when fewer than 2 GPUs."""
    import torch

    n = int(knobs.get("SGE3_TP") or min(torch.cuda.device_count() if torch.cuda.is_available() else 0, 8))
    while n > 1 and 8 % n:
        n -= 1
    return n if n >= 2 else 0


def wait_for(cond, timeout: float, what: str, poll: float = 0.2):
    """cond()'s first truthy value, polled every `poll` s; an assertion naming `what` after `timeout` s."""
    t_end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < t_end, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(poll)


def activation_env(tmp: Path, *, fallback: bool | None = None, **extra) -> dict:
    """SGLANG_EAGLE3_EXT=1 for the server and every worker it spawns. The workers need our .pth in a
    site dir: tests/gpu/run.sh installs it into site-packages (the real route); where that was not
    done, a sitecustomize.py with the same line on PYTHONPATH runs it in each interpreter (not
    usercustomize.py: a venv's interpreter, like the GPU host's, disables the user site and never imports it)."""
    import site
    import sysconfig

    paths = [str(REPO)]
    dirs = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    if fallback or (fallback is None and not any((Path(d) / PTH.name).exists() for d in dirs)):
        d = tmp / "sitecustomize_dir"
        d.mkdir(exist_ok=True)
        (d / "sitecustomize.py").write_text(PTH.read_text())
        paths.insert(0, str(d))
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"SGLANG_EAGLE3_EXT": "1", "PYTHONPATH": os.pathsep.join(paths + old), **extra}
