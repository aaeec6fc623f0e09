"""Ctrl-C and SIGTERM during `sglang-eagle3 train` (the Llama route, speculators' trainer): one line, exit 130,
no traceback, and nothing of the run left beside --out (its working folder, a half-written output)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("speculators.train.cli")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from train_world import SMALL, train_args, write_samples

from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_interrupts")
    target = ensure_tiny_target(root / "target", **SMALL)
    data = write_samples(root / "data", 40, lambda i: 48 + i % 17)
    return {"target": target, "data": data}


def _interrupt_while_training(world, runs, sig, workers: int) -> tuple[int, str]:
    runs.mkdir()
    argv = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext",
        "train",
        *train_args(world["data"], world["target"], runs / "out"),
        "--device",
        "cpu",
        "--total-seq-len",
        "512",
        "--num-workers",
        str(workers),
        "--epochs",
        "20",
        "--log-every",
        "1",
        "--min-val-acc",
        "0",
    ]
    p = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        seen.append(line)
        if not line or " step 2/" in line:  # training, its loader workers running
            break
    p.send_signal(sig)
    rest = p.communicate(timeout=120)[0]
    return p.returncode, "".join(seen) + rest


@pytest.mark.parametrize("sig,workers", [(signal.SIGTERM, 1), (signal.SIGINT, 0)])
def test_an_interrupt_while_training_exits_130_with_one_line(world, tmp_path, sig, workers):
    rc, err = _interrupt_while_training(world, tmp_path / "runs", sig, workers)
    assert " step 2/" in err, err[-3000:]
    assert rc == 130, err[-3000:]
    assert err.count("interrupted") == 1 and "train: interrupted;" in err, err[-3000:]
    assert "Traceback" not in err and "error" not in err, err[-3000:]
    # no working folder, no temporary output: at most --out itself (an epoch done before the signal)
    assert {p.name for p in (tmp_path / "runs").iterdir()} <= {"out"}
