"""Presets that match the hardware: a preset's forced NCCL profile is checked against the detected topology
(a contradiction stops the launch naming both and the fix; `--nccl-profile` on the command line overrides,
said once), and the NVLink presets keep custom all-reduce and NVLS on. The launcher runs in-process with
--dry-run on fake topologies (real SGLang 0.5.16 for the argument parser)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from unittest import mock

import pytest
import yaml
from test_launch_topology import cpu_root_ports, mixed_box, nvlink_box, pcie_switches

from sglang_eagle3_ext.cli import common as cli_common
from sglang_eagle3_ext.cli import launch as launch_server
from sglang_eagle3_ext.launch import presets

pytestmark = pytest.mark.sglang
REPO = Path(__file__).resolve().parents[3]


def launch(work: Path, *argv: str, env: dict | None = None, dry_run: bool = True) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `sglang-eagle3 launch ARGV [--dry-run]` run in-process in `work`, with
    no NCCL/our variables inherited from the caller's environment."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NCCL_", "GLOO_", "SGLANG_EAGLE3_EXT")) and k != "CUDA_VISIBLE_DEVICES"
    }
    clean.update({"SGLANG_EAGLE3_EXT_CACHE": str(work / "cache"), **(env or {})})
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    with (
        mock.patch.dict(os.environ, clean, clear=True),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        os.chdir(work)
        try:
            rc = cli_common.run_tool("launch", launch_server.main, [*argv, *(["--dry-run"] if dry_run else [])])
        finally:
            os.chdir(cwd)
    return rc, out.getvalue(), err.getvalue()


def topo_file(work: Path, topo) -> str:
    f = work / "topo.json"
    f.write_text(topo.to_json())
    return str(f)


def command(out: str) -> str:
    return out.split("SGLang command:", 1)[1].replace("\\\n", " ")


def decision_rows(out: str, name: str) -> list[str]:
    table = out.split("decisions (", 1)[1].split("SGLang command:", 1)[0]
    return [ln for ln in table.splitlines() if ln.strip().startswith(name)]


# ---- a forced profile that contradicts the machine ---------------------------------------------------------
@pytest.mark.parametrize(
    "preset, twin",
    [
        ("kimi-k25-eagle3-tp8-pcie", "kimi-k25-eagle3-tp8-nvlink"),
        ("kimi-k25-dump-tp8-pcie", "kimi-k25-dump-tp8-nvlink"),
    ],
)
def test_pcie_preset_on_an_nvlink_machine_is_refused_naming_both(tmp_path, preset, twin):
    rc, out, err = launch(tmp_path, "--preset", preset, "--topology-file", topo_file(tmp_path, nvlink_box()))
    assert rc == 2, out + err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert preset in line and "nccl_profile pcie" in line  # the preset and what it forces
    assert "full NVLink" in line and "NVSwitch" in line  # the detected class
    assert f"--preset {twin}" in line and "--nccl-profile pcie" in line  # the fix, and the override
    assert "SGLang command" not in out  # nothing planned, nothing started


@pytest.mark.parametrize("topo", [cpu_root_ports, pcie_switches, mixed_box])
def test_nvlink_preset_on_a_pcie_machine_is_refused(tmp_path, topo):
    t = topo()
    rc, _, err = launch(tmp_path, "--preset", "kimi-k25-eagle3-tp8-nvlink", "--topology-file", topo_file(tmp_path, t))
    assert rc == 2
    assert "kimi-k25-eagle3-tp8-nvlink" in err and "nccl_profile nvlink" in err and t.classify().value in err
    assert "--preset kimi-k25-eagle3-tp8-pcie" in err


def test_a_config_file_forcing_a_profile_is_checked_too(tmp_path):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text("model_path: /m\ntp_size: 8\neagle3_ext:\n  nccl_profile: nvlink\n")
    rc, _, err = launch(tmp_path, "--config", str(cfg), "--topology-file", topo_file(tmp_path, cpu_root_ports()))
    assert rc == 2 and f"--config {cfg}" in err and "PCIe through CPU" in err
    assert "--nccl-profile auto" in err  # no twin preset for a file of one's own: follow the detection


def test_command_line_profile_beats_the_detection_and_says_so_once(tmp_path):
    rc, out, err = launch(
        tmp_path,
        "--preset",
        "kimi-k25-eagle3-tp8-pcie",
        "--nccl-profile",
        "pcie",
        "--topology-file",
        topo_file(tmp_path, nvlink_box()),
    )
    assert rc == 0, err
    rows = decision_rows(out, "(nccl profile)")
    assert len(rows) == 1 and "--nccl-profile pcie" in rows[0] and "full NVLink" in rows[0], rows
    assert re.search(r"\buser\b", rows[0])
    nvls = decision_rows(out, "NCCL_NVLS_ENABLE")[0]
    assert "no NVSwitch detected" not in nvls and "--nccl-profile pcie" in nvls  # no false claim about the box
    assert "NCCL_NVLS_ENABLE=0" in command(out)  # the user's profile is what runs


def test_a_matching_or_unknown_topology_runs_the_presets_profile(tmp_path):
    rc, out, _ = launch(
        tmp_path, "--preset", "kimi-k25-eagle3-tp8-pcie", "--topology-file", topo_file(tmp_path, cpu_root_ports())
    )
    assert rc == 0
    row = decision_rows(out, "(nccl profile)")
    assert len(row) == 1 and "PCIe through CPU" in row[0] and "kimi-k25-eagle3-tp8-pcie" in row[0]
    # a machine without GPUs (or NVML): nothing to contradict, the README's dry runs work anywhere
    no_gpus = tmp_path / "none.json"
    no_gpus.write_text('{"gpus": [], "links": [], "note": "NVML unavailable"}')
    rc, out, _ = launch(tmp_path, "--preset", "kimi-k25-eagle3-tp8-pcie", "--topology-file", str(no_gpus))
    assert rc == 0 and "not checked" in decision_rows(out, "(nccl profile)")[0]


def test_preset_forced_wording_names_the_preset_not_a_flag_the_user_never_typed(tmp_path):
    rc, out, _ = launch(
        tmp_path, "--preset", "kimi-k25-eagle3-tp8-pcie", "--topology-file", topo_file(tmp_path, cpu_root_ports())
    )
    assert rc == 0
    assert "forced by --nccl-profile" not in out and "preset kimi-k25-eagle3-tp8-pcie" in out


# ---- the NVLink presets ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "preset", ["kimi-k25-eagle3-tp8-nvlink", "kimi-k25-dump-tp8-nvlink", "deepseek-v3-eagle3-tp8-nvlink"]
)
def test_nvlink_preset_on_nvlink_keeps_custom_all_reduce_and_nvls(tmp_path, preset):
    rc, out, err = launch(tmp_path, "--preset", preset, "--topology-file", topo_file(tmp_path, nvlink_box()))
    assert rc == 0, err
    cmd = command(out)
    assert "--disable-custom-all-reduce" not in cmd and "NCCL_NVLS_ENABLE" not in cmd
    assert re.search(r"NCCL_NVLS_ENABLE\s+\(unset\)\s+unset\s+NVSwitch present", out)
    assert "--enable-p2p-check" not in cmd


def _profile_of(name: str) -> str | None:
    return presets.load(name).ext.get("nccl_profile")


def test_every_hardware_preset_has_its_twin_and_its_name_says_its_profile():
    names = presets.available_presets()
    hw = [n for n in names if n.endswith(("-pcie", "-nvlink"))]
    assert {
        "kimi-k25-eagle3-tp8-pcie",
        "kimi-k25-eagle3-tp8-nvlink",
        "kimi-k25-dump-tp8-pcie",
        "kimi-k25-dump-tp8-nvlink",
    } <= set(hw)
    for n in hw:
        assert _profile_of(n) == n.rsplit("-", 1)[1], n
    pcie_only = {
        "disable_custom_all_reduce",
        "enable_nccl_nvls",
        "enable_symm_mem",
        "enforce_disable_flashinfer_allreduce_fusion",
    }
    for base in ("kimi-k25-eagle3-tp8", "kimi-k25-dump-tp8"):
        pcie, nvlink = presets.load(base + "-pcie"), presets.load(base + "-nvlink")
        # the same server but for the PCIe-only settings (what the NVLink twin keeps, it keeps alike)
        assert nvlink.server_args.items() <= pcie.server_args.items(), base
        assert set(pcie.server_args) - set(nvlink.server_args) <= pcie_only, base
        assert {k: v for k, v in pcie.ext.items() if k != "nccl_profile"} == {
            k: v for k, v in nvlink.ext.items() if k != "nccl_profile"
        }, base
    assert not any(
        n.endswith("-nvlink") and presets.load(n).server_args.get("disable_custom_all_reduce") for n in names
    )


def _readme_headings() -> set[str]:
    return {
        ln.lstrip("#").strip()
        for ln in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
        if ln.startswith("#")
    }


def test_preset_comments_point_at_shipped_documents():
    """A preset's comment names README sections that exist, and no file that is not shipped."""
    headings = _readme_headings()
    for path in sorted((REPO / "server_configs").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        yaml.safe_load(text)
        for ref in re.findall(r"README\.md, section \"([^\"]+)\"", text):
            assert ref in headings, f"{path.name}: README has no section {ref!r}"
        for ref in re.findall(r"\b[\w./-]+\.md\b", text):
            assert (REPO / ref).is_file(), f"{path.name}: {ref} is not shipped"
        assert "--preset " + path.stem in text, f"{path.name}: its usage line names another preset"
