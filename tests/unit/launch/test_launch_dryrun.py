"""`python -m sglang_eagle3_ext.launch_server ... --dry-run` run as a subprocess, on fake topologies.

Imports real SGLang (0.5.16 in the CPU venv) for the argument parser, hence the `sglang` mark.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_launch_topology import FAKES, cpu_root_ports

pytestmark = pytest.mark.sglang


def _clean_env(tmp_path, **extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NCCL_", "GLOO_", "SGLANG_EAGLE3_EXT")) and k != "CUDA_VISIBLE_DEVICES"
    }
    env["SGLANG_EAGLE3_EXT_CACHE"] = str(tmp_path / "cache")
    env.update(extra)
    return env


def dry_run(tmp_path, *args, env=None, check=True):
    p = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.launch_server", *args, "--dry-run"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env or _clean_env(tmp_path),
        timeout=240,
    )
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def _command(out: str) -> str:
    """The printed SGLang command (env prefix + argv), as one line."""
    return out.split("SGLang command:", 1)[1].replace("\\\n", " ")


def _topo_file(tmp_path, topo) -> str:
    f = tmp_path / "topo.json"
    f.write_text(topo.to_json())
    return str(f)


def test_readme_run_command_dry_run_on_a_cpu_machine(tmp_path):
    p = dry_run(tmp_path, "--preset", "tiny-dump")
    out = p.stdout
    cache = tmp_path / "cache" / "tiny-deepseek-v3"
    if "source nvml" not in out:
        assert "no GPU / NVML unavailable" in out
    assert f"{cache} (would be created on first use)" in out
    assert not cache.exists()  # dry-run makes nothing
    cmd = _command(out)
    assert f"--model-path {cache}" in cmd and "builtin:" not in cmd
    for a in (
        "--skip-tokenizer-init",
        "--attention-backend triton",
        "--sampling-backend pytorch",
        "--grammar-backend none",
        "--disable-prefill-cuda-graph",
        "--mem-fraction-static 0.3",
        "--disable-radix-cache",
    ):
        assert a in cmd
    assert "--disable-cuda-graph " not in cmd + " "  # decode CUDA graphs stay on
    assert "SGLANG_EAGLE3_EXT=1" in cmd
    assert f"SGLANG_EAGLE3_EXT_DUMP_DIR={tmp_path / 'dumps'}" in cmd
    assert "SGLANG_EAGLE3_EXT_DUMP_LAYERS=1,2,3" in cmd
    assert "NCCL_IB_DISABLE" not in cmd and "NCCL_P2P_DISABLE" not in cmd  # loopback/IB settings only on request
    assert not (tmp_path / "dumps").exists()


EXPECT = {  # name -> (class line, --disable-custom-all-reduce expected, NCCL_NVLS_ENABLE=0 expected)
    "cpu_root_ports": ("PCIe through CPU", True, True),
    "pcie_switches": ("PCIe behind switches", True, True),
    "nvlink": ("full NVLink", False, False),
    "geforce_no_p2p": ("no P2P", True, True),
    "mixed": ("mixed", True, True),
}


@pytest.mark.parametrize("name", list(FAKES))
def test_dry_run_per_topology(tmp_path, name):
    topo = FAKES[name][0]()
    n = len(topo.gpus)
    out = dry_run(tmp_path, "--preset", "tiny", "--tp", str(n), "--topology-file", _topo_file(tmp_path, topo)).stdout
    cls, car, nvls = EXPECT[name]
    assert f"topology: {cls} ({n} GPUs" in out
    cmd = _command(out)
    assert ("--disable-custom-all-reduce" in cmd) == car
    assert ("NCCL_NVLS_ENABLE=0" in cmd) == nvls
    assert "LL128" not in cmd and "NCCL_P2P_DISABLE" not in cmd and "NCCL_P2P_LEVEL" not in cmd
    # every decision has a reason
    table = out.split("decisions (", 1)[1].split("SGLang command:", 1)[0]
    assert re.search(r"NCCL_NVLS_ENABLE\s+0\s+set\s+no NVSwitch", table) or not nvls


def test_dry_run_keeps_user_env_and_user_args(tmp_path):
    env = _clean_env(tmp_path, NCCL_SOCKET_IFNAME="eth7", NCCL_DEBUG="INFO")
    out = dry_run(
        tmp_path,
        "--preset",
        "tiny",
        "--tp",
        "8",
        "--disable-custom-all-reduce",
        "--mem-fraction-static",
        "0.55",
        "--loopback-only",
        "--topology-file",
        _topo_file(tmp_path, cpu_root_ports()),
        env=env,
    ).stdout
    cmd = _command(out)
    assert "NCCL_SOCKET_IFNAME=" not in cmd and "NCCL_DEBUG=" not in cmd  # left to the inherited env
    assert re.search(r"NCCL_SOCKET_IFNAME\s+eth7\s+user", out)
    assert cmd.count("--disable-custom-all-reduce") == 1
    assert "--mem-fraction-static 0.55" in cmd and "0.3" not in cmd  # command line beats the preset
    assert "GLOO_SOCKET_IFNAME=lo" in cmd


def test_tp_group_follows_cuda_visible_devices(tmp_path):
    env = _clean_env(tmp_path, CUDA_VISIBLE_DEVICES="0,1,2,3")
    out = dry_run(
        tmp_path,
        "--preset",
        "tiny",
        "--tp",
        "4",
        "--topology-file",
        _topo_file(tmp_path, FAKES["pcie_switches"][0]()),
        env=env,
    ).stdout
    assert "topology: PCIe behind switches (4 GPUs" in out


def test_dry_run_warns_on_old_nccl_with_sm120_and_small_shm(tmp_path):
    topo = cpu_root_ports(nccl_version="2.26.2", shm=64 << 20)
    out = dry_run(
        tmp_path, "--preset", "tiny", "--tp", "8", "--preflight", "--topology-file", _topo_file(tmp_path, topo)
    ).stdout
    assert "NCCL 2.26.2 with SM120" in out and "--shm-size" in out
    assert "preflight: would all-reduce 256 KiB and 256 MiB across 8 GPU(s)" in out


def test_nccl_profile_off_sets_nothing(tmp_path):
    out = dry_run(
        tmp_path,
        "--preset",
        "tiny",
        "--tp",
        "8",
        "--nccl-profile",
        "off",
        "--topology-file",
        _topo_file(tmp_path, cpu_root_ports()),
    ).stdout
    cmd = _command(out)
    assert "NCCL_" not in cmd and "--disable-custom-all-reduce" not in cmd


def test_unknown_preset_key_is_refused_with_a_suggestion(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model_path: /m\ndisable_radix_cach: true\n")
    p = dry_run(tmp_path, "--config", str(cfg), check=False)
    assert p.returncode != 0
    assert "disable_radix_cach" in p.stderr and "did you mean 'disable_radix_cache'" in p.stderr


def test_unknown_preset_name_and_sglang_arg_fail_loudly(tmp_path):
    p = dry_run(tmp_path, "--preset", "tiny-dmp", check=False)
    assert p.returncode != 0 and "did you mean 'tiny-dump'" in p.stderr
    p = dry_run(tmp_path, "--preset", "tiny", "--no-such-sglang-arg", check=False)
    assert p.returncode == 2 and "--no-such-sglang-arg" in p.stderr


def test_help_shows_ours_and_help_sglang_sglangs(tmp_path):
    def help_text(flag):
        p = subprocess.run(
            [sys.executable, "-m", "sglang_eagle3_ext.launch_server", flag],
            capture_output=True,
            text=True,
            env=_clean_env(tmp_path),
            timeout=240,
        )
        assert p.returncode == 0, p.stderr
        return p.stdout

    ours, theirs = help_text("--help"), help_text("--help-sglang")
    assert "--preflight-timeout" in ours and "--help-sglang" in ours and "--mem-fraction-static" not in ours
    assert "--speculative-draft-model-path" in theirs and "--nccl-profile" not in theirs
