"""The dumping server `build --preset` starts: the launch library's plan (preset, NCCL settings, the dump folder,
our patches in every SGLang process), SGLang's own launcher in a child process of its own session, waited on
until healthy, and stopped (its whole process group) when the dump is done or anything fails."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

from .. import envs
from ..boundary import Refused
from ..launch.options import LaunchOptions
from ..launch.plan import build_plan
from ..server.http_client import Server, ServerError
from ..server.started import stop_group


@contextlib.contextmanager
def dumping_server(
    preset: str, target: str, dump_dir: Path, port: int, wait_s: float, log_path: Path, say, layers: str | None = None
):
    """Yield the URL of a server of `target` under `preset` dumping into `dump_dir`; `layers`: the aux layers it
    captures (SGLANG_EAGLE3_EXT_DUMP_LAYERS' text, over the preset's), None: the preset's."""
    from ..launch import start

    plan = build_plan(
        LaunchOptions(preset=preset, dump_dir=str(dump_dir)),
        ["--model-path", str(target), "--port", str(port), "--host", "127.0.0.1"],
    )
    env = {**envs.environ(), **plan.env_updates}
    if layers is not None:
        if env.get(envs.DUMP_LAYERS) not in (None, layers):
            say(f"dump: capturing {layers} (train's settings), not {envs.DUMP_LAYERS}={env[envs.DUMP_LAYERS]}")
        env[envs.DUMP_LAYERS] = layers
    start.prepare(plan, env, preflight=False, preflight_timeout=120.0)
    say(f"dump: starting the dumping server ({preset}, port {port}); its log: {log_path}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            plan.command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(Server(url), proc, wait_s, log_path)
        yield url
    finally:
        stop(proc, say)


def _wait(srv, proc, wait_s: float, log_path: Path) -> None:

    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise Refused(
                f"--preset: the dumping server exited with {proc.returncode} before it was ready; see {log_path}"
            )
        try:
            srv.wait_healthy(min(10.0, max(1.0, wait_s - (time.monotonic() - t0))), flag="--server-wait-s")
            return
        except ServerError as e:
            if time.monotonic() - t0 >= wait_s:
                raise Refused(
                    f"--server-wait-s {wait_s:g}: the dumping server was not healthy in time ({e}); see {log_path}"
                ) from None


def stop(proc, say) -> None:
    """Stop the dumping server (and its process group) unless it has already exited."""
    if proc.poll() is not None:
        return
    say(f"dump: stopping the dumping server (pid {proc.pid})")
    stop_group(proc)
