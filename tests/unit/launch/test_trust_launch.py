"""The launcher trusts nothing it reads: NCCL_PROTO is read as NCCL reads it, loopback pinning happens only on
request, topology files and command-line numbers are checked at the boundary (exit 2 naming the input)."""

from __future__ import annotations

import json
import os
import re
from unittest import mock

import pytest
from test_launch_topology import cpu_root_ports, nvlink_box

from sglang_eagle3_ext.cli import common as cli_common
from sglang_eagle3_ext.cli import launch as launch_server
from sglang_eagle3_ext.launch import nccl
from sglang_eagle3_ext.launch.topology import Topology

LOOPBACK_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_DISABLE")


def _by_name(decisions):
    return {d.name: d for d in decisions}


# ------------------------------------------------------------------ NCCL_PROTO as NCCL parses it


@pytest.mark.parametrize(
    "value",
    [
        "^LL",
        "^Simple",
        "^LL,Simple",
        "^ll",
        "LL128",
        "ll128,simple",
        "^",
        "allreduce:^LL",
        "^LL128;AllReduce:LL128",
        "LL,Simple;broadcast:^simple",
    ],
)
def test_values_that_turn_ll128_on_are_warned_over_pcie(value):
    d = _by_name(nccl.decide(cpu_root_ports(), tp_size=8, env={"NCCL_PROTO": value}))["NCCL_PROTO"]
    assert d.action == "warn" and "LL128" in d.reason and value in d.reason, d


@pytest.mark.parametrize(
    "value",
    [
        "LL,Simple",
        "Simple",
        "^LL128",
        "ll",
        "simple,LL",
        "^LL128;allreduce:^LL,LL128",
        "LL;allreduce:Simple",
        ",LL,,Simple,",
    ],
)
def test_values_without_ll128_are_kept_quietly(value):
    d = _by_name(nccl.decide(cpu_root_ports(), tp_size=8, env={"NCCL_PROTO": value}))["NCCL_PROTO"]
    assert d.action == "user" and d.value == value, d


def test_effective_protocol_sets():
    eff = nccl.nccl_proto_enabled
    assert eff("^LL")["AllReduce"] == {"LL128": "on", "Simple": "on", "LL": "off"}
    assert eff("^LL,Simple")["Broadcast"] == {"LL": "off", "LL128": "on", "Simple": "off"}
    assert eff("Simple")["AllReduce"] == {"LL": "off", "LL128": "off", "Simple": "on"}
    both = eff("^LL128;allreduce:LL128")
    assert both["AllReduce"]["LL128"] == "on" and both["AllGather"]["LL128"] == "off"
    assert eff("")["AllReduce"]["LL128"] == "auto"  # empty: NCCL's own rule
    for bad in ("LL129", "LL, Simple", "foo:LL", "LL;Simple", ";LL", "^^LL", ":", "a:b"):
        with pytest.raises(ValueError):
            eff(bad)


def test_a_value_nccl_refuses_is_warned_not_crashed():
    d = _by_name(nccl.decide(cpu_root_ports(), tp_size=8, env={"NCCL_PROTO": "LL, Simple"}))["NCCL_PROTO"]
    assert d.action == "warn" and "refuse" in d.reason


def test_ll128_forced_on_nvlink_is_the_users_call():
    d = _by_name(nccl.decide(nvlink_box(), tp_size=8, env={"NCCL_PROTO": "^LL"}))["NCCL_PROTO"]
    assert d.action == "user" and "LL128" in d.reason


# ------------------------------------------------------------------ loopback pinning only on request


def test_single_node_leaves_interfaces_and_ib_to_nccl_by_default():
    ds = nccl.decide(cpu_root_ports(), tp_size=8, env={})
    env = nccl.apply_env(ds, {})
    assert not set(LOOPBACK_VARS) & set(env)
    notes = [d for d in ds if "init_weights_update_group" in d.reason]
    assert len(notes) == 1 and "--loopback-only" in notes[0].reason  # said once, with the way to ask


def test_loopback_only_pins_bootstrap_and_skips_ib():
    ds = nccl.decide(cpu_root_ports(), tp_size=8, env={"NCCL_IB_DISABLE": "0"}, loopback_only=True)
    by = _by_name(ds)
    assert by["NCCL_SOCKET_IFNAME"].value == "lo" and by["GLOO_SOCKET_IFNAME"].applies
    assert by["NCCL_IB_DISABLE"].action == "user"  # the user's own value still wins
    assert all("--loopback-only" in by[v].reason for v in LOOPBACK_VARS)


# ------------------------------------------------------------------ the command line, in-process


def _clean_env(tmp_path, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NCCL_", "GLOO_", "SGLANG_EAGLE3_EXT")) and k != "CUDA_VISIBLE_DEVICES"
    }
    return {**env, "SGLANG_EAGLE3_EXT_CACHE": str(tmp_path / "cache"), **extra}


def launch(tmp_path, *argv, env=None, capsys=None):
    """(exit code, stdout, stderr) of `sglang-eagle3 launch ARGV --dry-run` run in this process."""
    with mock.patch.dict(os.environ, env or _clean_env(tmp_path), clear=True):
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            rc = cli_common.run_tool("launch", launch_server.main, [*argv, "--dry-run", "--skip-draft-check"])
        finally:
            os.chdir(cwd)
    out = capsys.readouterr() if capsys else None
    return rc, (out.out if out else ""), (out.err if out else "")


def _topo(tmp_path, topo=None, text=None):
    f = tmp_path / "topo.json"
    f.write_text(text if text is not None else topo.to_json())
    return str(f)


def _command(out: str) -> str:
    return out.split("SGLang command:", 1)[1].replace("\\\n", " ")


@pytest.mark.sglang
def test_dry_run_default_has_no_loopback_settings(tmp_path, capsys):
    rc, out, err = launch(
        tmp_path, "--preset", "tiny", "--tp", "8", "--topology-file", _topo(tmp_path, cpu_root_ports()), capsys=capsys
    )
    assert rc == 0, err
    cmd = _command(out)
    assert not any(f"{v}=" in cmd for v in LOOPBACK_VARS)
    assert "init_weights_update_group" in out


@pytest.mark.sglang
@pytest.mark.parametrize("how", ["flag", "preset"])
def test_dry_run_loopback_on_request(tmp_path, capsys, how):
    if how == "flag":
        args = ["--preset", "tiny", "--loopback-only"]
    else:
        cfg = tmp_path / "lo.yaml"
        cfg.write_text("model_path: /m\neagle3_ext:\n  loopback_only: true\n")
        args = ["--config", str(cfg)]
    rc, out, err = launch(
        tmp_path, *args, "--tp", "8", "--topology-file", _topo(tmp_path, cpu_root_ports()), capsys=capsys
    )
    assert rc == 0, err
    cmd = _command(out)
    assert all(f"{v}=" in cmd for v in LOOPBACK_VARS)
    assert re.search(r"NCCL_SOCKET_IFNAME\s+lo\s+set\s+.*loopback", out)


@pytest.mark.sglang
def test_loopback_only_with_several_nodes_is_refused(tmp_path, capsys):
    rc, _, err = launch(
        tmp_path,
        "--preset",
        "tiny",
        "--loopback-only",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "10.0.0.1:5000",
        capsys=capsys,
    )
    assert rc == 2 and "--loopback-only" in err and "--nnodes" in err


@pytest.mark.sglang
def test_dry_run_warns_on_negated_proto(tmp_path, capsys):
    env = _clean_env(tmp_path, NCCL_PROTO="^LL")
    rc, out, err = launch(
        tmp_path,
        "--preset",
        "tiny",
        "--tp",
        "8",
        "--topology-file",
        _topo(tmp_path, cpu_root_ports()),
        env=env,
        capsys=capsys,
    )
    assert rc == 0, err
    assert re.search(r"NCCL_PROTO\s+\S+\s+warn\s+.*LL128", out)


@pytest.mark.sglang
@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--tp", "-1"], "--tp"),
        (["--tp-size", "0"], "--tp-size"),
        (["--nnodes", "0"], "--nnodes"),
        (["--base-gpu-id", "-2"], "--base-gpu-id"),
        (["--preflight-timeout", "-5"], "--preflight-timeout"),
        (["--preflight-timeout", "nan"], "--preflight-timeout"),
    ],
)
def test_bad_numbers_name_the_flag_typed(tmp_path, capsys, argv, flag):
    rc, _, err = launch(
        tmp_path, "--preset", "tiny", *argv, "--topology-file", _topo(tmp_path, cpu_root_ports()), capsys=capsys
    )
    assert rc == 2, err
    assert flag in err and "error:" in err and "Traceback" not in err


@pytest.mark.sglang
def test_bad_tp_in_a_preset_names_the_file_and_key(tmp_path, capsys):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("model_path: /m\ntp_size: 0\n")
    rc, _, err = launch(tmp_path, "--config", str(cfg), capsys=capsys)
    assert rc == 2 and str(cfg) in err and "tp_size" in err


# ------------------------------------------------------------------ topology files

BAD_TOPOLOGIES = {
    "top level a list": ([], "top level"),
    "shm_bytes a string": ({"shm_bytes": "big"}, "shm_bytes"),
    "gpu index a string": ({"gpus": [{"index": "a"}]}, "gpus[0]"),
    "gpu not an object": ({"gpus": [5]}, "gpus[0]"),
    "gpus an object": ({"gpus": {"0": {}}}, "gpus"),
    "link path a number": (
        {"gpus": [{"index": 0}, {"index": 1}], "links": [{"a": 0, "b": 1, "pcie_path": 5}]},
        "links[0]",
    ),
    "nvlink a string": (
        {"gpus": [{"index": 0}, {"index": 1}], "links": [{"a": 0, "b": 1, "pcie_path": "SYS", "nvlink": "yes"}]},
        "nvlink",
    ),
    "iommu unknown word": ({"iommu": "maybe"}, "iommu"),
    "compute capability a float": ({"gpus": [{"index": 0, "compute_capability": 12.0}]}, "compute_capability"),
    "duplicate gpu": ({"gpus": [{"index": 0}, {"index": 0}]}, "gpus[1]"),
    "pcie_gen negative": ({"gpus": [{"index": 0, "pcie_gen": -1}]}, "pcie_gen"),
}


@pytest.mark.parametrize("name", list(BAD_TOPOLOGIES))
def test_bad_topology_file_is_refused_naming_file_and_key(tmp_path, name):
    data, key = BAD_TOPOLOGIES[name]
    f = tmp_path / "t.json"
    f.write_text(json.dumps(data))
    from sglang_eagle3_ext.boundary import BadInput

    with pytest.raises(BadInput) as e:
        Topology.load(f)
    assert str(f) in str(e.value) and key in str(e.value), str(e.value)


@pytest.mark.sglang
@pytest.mark.parametrize("name", ["shm_bytes a string", "top level a list", "link path a number"])
def test_bad_topology_file_exits_2_in_the_launcher(tmp_path, capsys, name):
    rc, _, err = launch(
        tmp_path,
        "--preset",
        "tiny",
        "--tp",
        "2",
        "--topology-file",
        _topo(tmp_path, text=json.dumps(BAD_TOPOLOGIES[name][0])),
        capsys=capsys,
    )
    assert rc == 2, err
    assert "--topology-file" in err and "topo.json" in err


def test_good_topology_files_still_round_trip(tmp_path):
    topo = cpu_root_ports()
    f = tmp_path / "t.json"
    f.write_text(topo.to_json())
    back = Topology.load(f)
    assert back.gpus == topo.gpus and back.links == topo.links and back.source == f"file:{f}"
    assert Topology.from_json("{}") == Topology()


def test_cuda_visible_devices_with_non_ascii_digits_is_not_a_crash():
    from sglang_eagle3_ext.launch.topology import visible_indices

    assert visible_indices(cpu_root_ports(), {"CUDA_VISIBLE_DEVICES": "0,\u00b2,3"}) == [0, 3]


@pytest.mark.parametrize(
    "argv",
    [
        ["--nprocs", "0"],
        ["--nprocs", "2", "--timeout", "nan"],
        ["--nprocs", "2", "--sizes", "1,x"],
        ["--nprocs", "2", "--base-gpu-id", "-1"],
    ],
)
def test_preflight_tool_refuses_bad_numbers_by_flag(argv, capsys):
    from sglang_eagle3_ext.launch import preflight

    with pytest.raises(SystemExit) as e:
        preflight.main(argv)
    assert e.value.code == 2 and argv[-2] in capsys.readouterr().err
