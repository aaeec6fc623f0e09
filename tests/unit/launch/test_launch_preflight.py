"""Preflight on CPU: real gloo all-reduces through the default worker, and injected workers that hang
or crash, to check the timeout -> retry with NCCL_P2P_DISABLE=1 -> report path and its timing."""

from __future__ import annotations

import os
import textwrap
import time

import pytest

from sglang_eagle3_ext.launch import preflight

WORKERS = textwrap.dedent("""
    import os, time
    from sglang_eagle3_ext.launch.preflight import allreduce_worker

    def hang_unless_p2p_off(rank, world_size, init_method, backend, sizes, device_index, timeout):
        # like an IOMMU/ACS box: the P2P path never completes, SHM works
        if os.environ.get("NCCL_P2P_DISABLE") != "1":
            time.sleep(3600)
        return allreduce_worker(rank, world_size, init_method, backend, sizes, device_index, timeout)

    def always_hang(rank, *a):
        time.sleep(3600)

    def rank1_crashes(rank, *a):
        if rank == 1:
            raise RuntimeError("simulated NCCL error: unhandled system error")
        time.sleep(3600)
""")
SMALL = (256 << 10, 4 << 20)


@pytest.fixture
def worker_env(tmp_path):
    (tmp_path / "sge3_fake_workers.py").write_text(WORKERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    return env


def test_busbw_formula():
    assert preflight.busbw(10.0, 8) == pytest.approx(17.5)
    assert preflight.busbw(10.0, 2) == pytest.approx(10.0)


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    """One good attempt (the default worker, 2 ranks): checked below, and its duration scales the timeouts of the
    tests that need an attempt to succeed, so that they hold on a busy machine."""
    return preflight.run_preflight(
        2, backend="gloo", sizes=SMALL, timeout=600, workdir=str(tmp_path_factory.mktemp("gloo"))
    )


def test_default_worker_all_reduces_with_gloo(gloo_run):
    res = gloo_run
    assert res.ok, res.report()
    (a,) = res.attempts
    assert a.status == "ok" and [r.nbytes for r in a.results] == list(SMALL)
    for r in a.results:
        assert r.algbw_gbs > 0 and r.busbw_gbs == pytest.approx(r.algbw_gbs)  # n=2: busbw == algbw
    assert "busbw" in res.report() and res.decisions == []


def test_hang_is_retried_with_p2p_disabled_and_reported_in_time(worker_env, tmp_path, gloo_run):
    assert gloo_run.ok, gloo_run.report()
    timeout = max(10.0, 3 * gloo_run.attempts[0].seconds)  # the retry must succeed within it: 3 good attempts
    t0 = time.monotonic()
    res = preflight.run_preflight(
        2,
        env=worker_env,
        backend="gloo",
        sizes=SMALL,
        timeout=timeout,
        worker="sge3_fake_workers:hang_unless_p2p_off",
        workdir=str(tmp_path),
    )
    elapsed = time.monotonic() - t0
    assert res.ok, res.report()
    first, second = res.attempts
    assert first.status == "timeout" and timeout <= first.seconds < timeout + 5
    assert second.status == "ok" and second.env_overrides == {"NCCL_P2P_DISABLE": "1"} and second.results
    (d,) = res.decisions
    assert (d.name, d.value) == ("NCCL_P2P_DISABLE", "1") and "IOMMU" in d.reason
    assert "NCCL_P2P_DISABLE=1" in res.message
    assert elapsed < 2 * timeout + 10


def test_hang_everywhere_stops_with_the_host_fix(worker_env, tmp_path):
    timeout = 5.0
    t0 = time.monotonic()
    res = preflight.run_preflight(
        2,
        env=worker_env,
        backend="gloo",
        sizes=SMALL,
        timeout=timeout,
        worker="sge3_fake_workers:always_hang",
        workdir=str(tmp_path),
        host_hints=["/dev/shm is 64 MiB"],
    )
    elapsed = time.monotonic() - t0
    assert not res.ok and [a.status for a in res.attempts] == ["timeout", "timeout"]
    assert "iommu=pt" in res.message and "ACS" in res.message and "/dev/shm is 64 MiB" in res.message
    assert elapsed < 2 * timeout + 30  # the workers sleep an hour; 30 s for spawning and killing them under load


def test_user_set_p2p_disable_is_not_overridden(worker_env, tmp_path):
    res = preflight.run_preflight(
        2,
        env={**worker_env, "NCCL_P2P_DISABLE": "0"},
        backend="gloo",
        sizes=SMALL,
        timeout=4,
        worker="sge3_fake_workers:always_hang",
        workdir=str(tmp_path),
    )
    assert not res.ok and len(res.attempts) == 1
    assert "NCCL_P2P_DISABLE=0 was set by you" in res.message


def test_a_crashing_rank_is_reported_without_waiting_for_the_timeout(worker_env, tmp_path):
    t0 = time.monotonic()
    res = preflight.run_preflight(
        2,
        env=worker_env,
        backend="gloo",
        sizes=SMALL,
        timeout=300,
        retry=False,
        worker="sge3_fake_workers:rank1_crashes",
        workdir=str(tmp_path),
    )
    assert time.monotonic() - t0 < 150  # the timeout is 300 s; the crash comes after torch's import, slow under load
    (a,) = res.attempts
    assert not res.ok and a.status == "error" and "rank 1" in a.detail
    assert "simulated NCCL error" in res.message
