"""The servers the package starts: SGLang's own parser reads the EAGLE-3 chain flags as meant, and a server's
whole process group stops, a child that ignores SIGTERM included."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import pytest

from sglang_eagle3_ext.server.started import eagle3_chain_args, stop_group


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_sglang_reads_the_chain_flags(steps, tmp_path):
    server_args = pytest.importorskip("sglang.srt.server_args")
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(["--model-path", "m", *eagle3_chain_args(steps, tmp_path / "draft")])
    assert ns.speculative_algorithm == "EAGLE3" and ns.speculative_draft_model_path == str(tmp_path / "draft")
    assert (ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens) == (
        steps,
        1,
        steps + 1,
    )
    assert "--speculative-draft-model-path" not in eagle3_chain_args(steps)


def _group(leader_ignores_term: bool, child_ignores_term: bool) -> tuple[subprocess.Popen, int]:
    """A process group: a leader and one child (a SGLang scheduler, say); (leader, child pid)."""
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code = (
        "import signal, subprocess, sys, time\n"
        + (ignore if leader_ignores_term else "")
        + "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        + (ignore if child_ignores_term else "")
        + "print(1, flush=True); time.sleep(600)'], stdout=subprocess.PIPE)\n"
        "c.stdout.readline(); print(c.pid, flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    return proc, int(proc.stdout.readline())


def _gone(pid: int) -> bool:
    for _ in range(100):  # killed, then reaped by init (or left a zombie for a moment)
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_a_group_deaf_to_sigterm_is_killed_after_the_grace():
    proc, child = _group(leader_ignores_term=True, child_ignores_term=True)
    t0 = time.monotonic()
    stop_group(proc, grace_s=1.0)
    assert proc.returncode == -9 and 1.0 <= time.monotonic() - t0 < 30
    assert _gone(child), f"child {child} outlived its group's SIGKILL"
    stop_group(proc)  # a group already gone is no error


def test_sigterm_reaches_the_whole_group():
    proc, child = _group(leader_ignores_term=False, child_ignores_term=False)
    stop_group(proc, grace_s=30.0)
    assert proc.returncode == -15, "the leader ends on SIGTERM within the grace"
    assert _gone(child), f"child {child} did not get the group's SIGTERM"
