"""tests/gpu/pause.sh: a background job (bg.sh) is frozen, its children included, while the timed job runs,
and continues once the timed job has ended; a job that already ended is left alone."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not (shutil.which("setsid") and shutil.which("ps") and shutil.which("flock")),
                                reason="needs setsid, ps and flock (util-linux, procps)")


def _ticks(f: Path) -> int:
    return len(f.read_text().splitlines()) if f.exists() else 0


def test_pause_freezes_until_the_timed_job_ends(tmp_path):
    env = {**os.environ, "SGE3_BG_ROOT": str(tmp_path / "bg"), "SGE3_START_LOCK": str(tmp_path / "lock")}
    ticks = tmp_path / "ticks"
    bg = [str(REPO / "tests/gpu/bg.sh"), "start"]
    # the ticking is done by a child process (a grandchild of the job's shell): the tree is frozen, not one pid
    subprocess.run([*bg, "worker", f"bash -c 'while true; do echo x >> {ticks}; sleep 0.05; done'"], env=env,
                   check=True)
    subprocess.run([*bg, "done", "true"], env=env, check=True)
    gate = tmp_path / "go"
    subprocess.run([*bg, "timed", f"while [ ! -e {gate} ]; do sleep 0.1; done"], env=env, check=True)
    try:
        deadline = time.time() + 10
        while _ticks(ticks) < 3 and time.time() < deadline:
            time.sleep(0.05)
        p = subprocess.run([str(REPO / "tests/gpu/pause.sh"), "timed", "worker", "done"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("frozen:") and len(p.stdout.split()) >= 3      # the job's shell and its children
        time.sleep(0.3)
        n = _ticks(ticks)
        time.sleep(1.0)
        assert _ticks(ticks) == n, "the worker kept running while frozen"
        gate.touch()                                                               # the timed job ends
        deadline = time.time() + 15
        while _ticks(ticks) == n and time.time() < deadline:
            time.sleep(0.1)
        assert _ticks(ticks) > n, "the worker was not continued after the timed job ended"
    finally:
        gate.touch()
        subprocess.run(["pkill", "-CONT", "-f", str(ticks)])
        subprocess.run(["pkill", "-f", str(ticks)])
