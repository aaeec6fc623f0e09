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


LOADER_CHILD = r"""
import os, signal, sys
import torch
from torch.utils.data import Dataset
from sglang_eagle3_ext.interrupts import interruptible
from sglang_eagle3_ext.training.workers import QuietLoader, quiet_workers

class Items(Dataset):
    pickled = 0

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i])

    def __getstate__(self):  # pickled for each spawned worker, in this process, while the workers start
        Items.pickled += 1
        if Items.pickled == 2:  # the first worker importing, the second not started: Ctrl-C to the group
            os.killpg(0, signal.SIGINT)
        return {}

if __name__ == "__main__":
    loader = QuietLoader(
        Items(), batch_size=1, num_workers=2, multiprocessing_context="spawn", worker_init_fn=quiet_workers()
    )
    try:
        with interruptible("train"):
            n = sum(1 for _ in loader)
        print(f"lost: read all {n} batches", flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print("train: interrupted", flush=True)
        sys.exit(130)
"""


def test_ctrl_c_while_spawned_loader_workers_start_is_not_lost_nor_a_worker_traceback(tmp_path):
    """A Ctrl-C to the process group in the instant the loader starts its workers (the first importing torch,
    the second about to start): the training process raises it once they have started, and no worker prints."""
    script = tmp_path / "loader_child.py"
    script.write_text(LOADER_CHILD)
    p = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        out = p.communicate(timeout=240)[0]  # hang protection only
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, out
    assert out.count("interrupted") == 1 and "Traceback" not in out and "KeyboardInterrupt" not in out, out
