"""`launch` without --dry-run on a machine SGLang cannot serve on (no GPU, no other accelerator): one line naming
--dry-run, exit 2, before the plan is printed or anything is written (no dump folder, no tiny target). Machines
with a GPU, and a `--device` of the user's choosing, go ahead as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext.launch import start
from sglang_eagle3_ext.launch.errors import LaunchError
from sglang_eagle3_ext.launch.plan import Plan
from sglang_eagle3_ext.launch.topology import GPU, Topology

pytestmark = pytest.mark.sglang
REPO = Path(__file__).resolve().parents[3]


def sglang_sees_an_accelerator() -> bool:
    from sglang.srt.utils.common import get_device

    try:
        get_device()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def no_accelerator():
    if sglang_sees_an_accelerator():
        pytest.skip("this machine has an accelerator: SGLang would serve here")


def plan_on(topo: Topology, *sglang_args: str) -> Plan:
    return Plan(list(sglang_args), {}, [], topo, 1, "auto", "preset: none", "model: as given", "sglang: test")


def test_the_first_run_command_stops_in_one_line_before_writing_anything(no_accelerator, tmp_path):
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_EAGLE3_EXT", "NCCL_"))}
    env.update(SGLANG_EAGLE3_EXT_CACHE=str(cache), PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext", "launch", "--preset", "tiny-dump", "--json", "plan.json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [ln for ln in p.stderr.splitlines() if ": error: " in ln]
    assert p.returncode == 2, p.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in p.stderr and "SGLang command" not in p.stderr, p.stderr[-3000:]
    assert errors[0].startswith("sglang-eagle3 launch: error: no GPU here") and "--dry-run" in errors[0], errors
    assert list(work.iterdir()) == [] and not cache.exists()  # no ./dumps, no plan file, no tiny target


def test_a_topology_file_with_gpus_does_not_stand_for_this_machine(no_accelerator, tmp_path):
    topo = Topology(gpus=[GPU(0, "NVIDIA H100")], source=f"file:{tmp_path / 'topo.json'}")
    with pytest.raises(LaunchError, match=r"no GPU here \(SGLang: .*\).*--dry-run"):
        start.require_accelerator(plan_on(topo, "--model-path", "m"))


def test_gpus_seen_by_nvml_or_a_chosen_device_go_ahead():
    """Asked on this machine, SGLang may find no accelerator: a GPU that NVML sees, or the user's --device,
    must not ask it at all."""
    gpus = Topology(gpus=[GPU(0, "NVIDIA H100"), GPU(1, "NVIDIA H100")], source="nvml")
    start.require_accelerator(plan_on(gpus, "--model-path", "m", "--tp-size", "2"))
    for device in (["--device", "cpu"], ["--device=cpu"]):
        start.require_accelerator(plan_on(Topology(source="none"), "--model-path", "m", *device))
