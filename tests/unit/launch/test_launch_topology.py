"""Topology classification, JSON round-trip and the NCCL decisions, on fake machines (no GPU needed).

FAKES is imported by test_launch_dryrun.py too.
"""

from __future__ import annotations

import pytest

from sglang_eagle3_ext.launch import nccl
from sglang_eagle3_ext.launch.topology import GPU, Link, Topology, TopologyClass, iommu_state, shm_size


def _machine(name: str, cc: str, n: int, link_of, nvswitch=False, nccl_version="2.28.3", shm=16 << 30) -> Topology:
    gpus = [
        GPU(
            index=i,
            name=name,
            uuid=f"GPU-{i:04d}",
            pci_bus_id=f"0000:{i + 1:02x}:00.0",
            compute_capability=cc,
            pcie_gen=5,
            pcie_width=16,
        )
        for i in range(n)
    ]
    links = [link_of(i, j) for i in range(n) for j in range(i + 1, n)]
    return Topology(
        gpus=gpus,
        links=links,
        nvswitch=nvswitch,
        driver_version="580.65",
        nccl_version=nccl_version,
        shm_bytes=shm,
        iommu="off",
        source="fake",
    )


def cpu_root_ports(n=8, **kw):  # 8x RTX PRO 6000 on two sockets' root ports
    return _machine(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "12.0",
        n,
        lambda i, j: Link(i, j, "NODE" if i // 4 == j // 4 else "SYS"),
        **kw,
    )


def pcie_switches(n=8, **kw):  # 4 GPUs per switch, switches under one root complex
    return _machine(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "12.0",
        n,
        lambda i, j: Link(i, j, "PIX" if i // 4 == j // 4 else "PXB"),
        **kw,
    )


def nvlink_box(n=8, **kw):  # HGX H200
    return _machine("NVIDIA H200", "9.0", n, lambda i, j: Link(i, j, "SYS", nvlink=True), **{"nvswitch": True, **kw})


def geforce_no_p2p(n=4, **kw):  # 4x 5090, stock driver: no P2P
    return _machine(
        "NVIDIA GeForce RTX 5090",
        "12.0",
        n,
        lambda i, j: Link(i, j, "NODE", p2p_read="CHIPSET_NOT_SUPPORTED", p2p_write="CHIPSET_NOT_SUPPORTED"),
        **kw,
    )


def mixed_box(n=8, **kw):  # NVLink bridges on pairs, PCIe through the CPU between pairs
    return _machine("NVIDIA RTX A6000", "8.6", n, lambda i, j: Link(i, j, "SYS", nvlink=(i // 2 == j // 2)), **kw)


FAKES = {
    "cpu_root_ports": (cpu_root_ports, TopologyClass.PCIE_CPU),
    "pcie_switches": (pcie_switches, TopologyClass.PCIE_SWITCH),
    "nvlink": (nvlink_box, TopologyClass.NVLINK),
    "geforce_no_p2p": (geforce_no_p2p, TopologyClass.NO_P2P),
    "mixed": (mixed_box, TopologyClass.MIXED),
}


def _by_name(decisions):
    return {d.name: d for d in decisions}


@pytest.mark.parametrize("name", list(FAKES))
def test_classify_and_json_round_trip(name):
    make, expected = FAKES[name]
    topo = make()
    assert topo.classify() == expected
    back = Topology.from_json(topo.to_json())
    assert back == topo
    assert back.classify() == expected


def test_classify_edge_cases():
    assert Topology().classify() == TopologyClass.NO_GPU
    assert cpu_root_ports().subset([3]).classify() == TopologyClass.SINGLE_GPU
    # a TP group inside one switch of a CPU-rooted box is a switch group
    assert pcie_switches().subset([0, 1, 2, 3]).classify() == TopologyClass.PCIE_SWITCH
    # the 4 GPUs of one socket: NODE only, still through the CPU
    assert cpu_root_ports().subset([0, 1, 2, 3]).classify() == TopologyClass.PCIE_CPU
    # a pair bridged by NVLink out of the mixed box is a full NVLink group
    assert mixed_box().subset([0, 1]).classify() == TopologyClass.NVLINK
    # one pair refusing P2P turns a PCIe box into "mixed"
    t = pcie_switches()
    t.links[0].p2p_read = "NOT_SUPPORTED"
    assert t.classify() == TopologyClass.MIXED


def test_from_json_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown keys"):
        Topology.from_dict({"gpus": [], "gpu_count": 3})


@pytest.mark.parametrize("name", ["cpu_root_ports", "pcie_switches", "geforce_no_p2p", "mixed"])
def test_pcie_like_decisions(name):
    topo = FAKES[name][0]()
    ds = _by_name(nccl.decide(topo, tp_size=len(topo.gpus), env={}))
    assert "NCCL_IB_DISABLE" not in ds and "NCCL_SOCKET_IFNAME" not in ds  # loopback only on request
    assert ds["NCCL_NVLS_ENABLE"].value == "0" and ds["NCCL_NVLS_ENABLE"].applies
    assert ds["--disable-custom-all-reduce"].applies
    env = nccl.apply_env(ds.values(), {})
    assert "NCCL_P2P_DISABLE" not in env and "NCCL_P2P_LEVEL" not in env
    assert "NCCL_PROTO" not in env and "NCCL_ALGO" not in env and "CUDA_DEVICE_MAX_CONNECTIONS" not in env


def test_nvlink_decisions_leave_custom_all_reduce_and_nvls():
    ds = _by_name(nccl.decide(nvlink_box(), tp_size=8, env={}))
    assert "--disable-custom-all-reduce" not in ds
    assert not ds["NCCL_NVLS_ENABLE"].applies  # NVSwitch: NCCL decides
    assert "NCCL_NVLS_ENABLE" not in nccl.apply_env(ds.values(), {})
    # NVLink without a switch (bridged pair): NVLS off
    ds = _by_name(nccl.decide(nvlink_box(2, nvswitch=False), tp_size=2, env={}))
    assert ds["NCCL_NVLS_ENABLE"].value == "0" and ds["NCCL_NVLS_ENABLE"].applies


def test_tp2_pcie_asks_sglang_to_check_p2p_and_no_p2p_disables_custom_all_reduce():
    ds = _by_name(nccl.decide(cpu_root_ports(2), tp_size=2, env={}))
    assert ds["--enable-p2p-check"].applies and "--disable-custom-all-reduce" not in ds
    ds = _by_name(nccl.decide(geforce_no_p2p(2), tp_size=2, env={}))
    assert ds["--disable-custom-all-reduce"].applies


def test_user_environment_is_never_overridden():
    env = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_NVLS_ENABLE": "1", "NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "0"}
    ds = nccl.decide(cpu_root_ports(), tp_size=8, env=env, loopback_only=True)
    out = nccl.apply_env(ds, dict(env))
    assert {k: out[k] for k in env} == env  # every variable the user set is exactly as it was
    by = _by_name(ds)
    assert by["NCCL_SOCKET_IFNAME"].action == "user" and "lo" in by["NCCL_SOCKET_IFNAME"].reason
    assert by["GLOO_SOCKET_IFNAME"].applies  # the ones the user did not set are still decided


def test_user_flags_are_never_added_twice_and_ll128_is_flagged():
    ds = _by_name(
        nccl.decide(
            cpu_root_ports(),
            tp_size=8,
            env={"NCCL_PROTO": "LL128"},
            user_flags={"disable_custom_all_reduce", "enable_symm_mem"},
        )
    )
    assert ds["--disable-custom-all-reduce"].action == "user"
    assert nccl.extra_args(ds.values()).count("--disable-custom-all-reduce") == 0
    assert ds["NCCL_PROTO"].action == "warn" and "LL128" in ds["NCCL_PROTO"].reason
    assert ds["--enable-symm-mem"].action == "warn"
    # excluding LL128 is fine
    ds = _by_name(nccl.decide(cpu_root_ports(), tp_size=8, env={"NCCL_PROTO": "^LL128"}))
    assert ds["NCCL_PROTO"].action == "user"


def test_profiles():
    # pcie forced on an NVLink box (the GPU test does this)
    ds = _by_name(nccl.decide(nvlink_box(2), profile="pcie", tp_size=2, env={}))
    assert ds["--enable-p2p-check"].applies and ds["NCCL_NVLS_ENABLE"].value == "0"
    ds = nccl.decide(cpu_root_ports(), profile="off", tp_size=8, env={})
    assert nccl.apply_env(ds, {}) == {} and nccl.extra_args(ds) == []
    with pytest.raises(ValueError, match="auto, pcie, nvlink, off"):
        nccl.decide(cpu_root_ports(), profile="fast")


def test_flags_missing_from_the_installed_release_are_not_added():
    ds = _by_name(nccl.decide(cpu_root_ports(), tp_size=8, env={}, available_flags={"disable_custom_all_reduce"}))
    assert ds["--disable-custom-all-reduce"].applies
    assert not ds["--enforce-disable-flashinfer-allreduce-fusion"].applies


def test_host_warnings():
    old = dict(nccl.host_warnings(cpu_root_ports(nccl_version="2.26.2", shm=64 << 20)))
    assert "2.26.2" in old["NCCL version"] and "64 MiB" in old["/dev/shm"]
    assert nccl.host_warnings(cpu_root_ports()) == []
    assert nccl.host_warnings(nvlink_box(nccl_version="2.26.2")) == []  # not SM120
    t = pcie_switches()
    t.iommu, t.iommu_evidence = "on", "test"
    assert "iommu=pt" in dict(nccl.host_warnings(t))["IOMMU"]


def test_iommu_and_shm_probes(tmp_path):
    cmd = tmp_path / "cmdline"
    sysfs = tmp_path / "iommu"
    sysfs.mkdir()
    cmd.write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n")
    assert iommu_state(str(cmd), str(sysfs))[0] == "off"
    (sysfs / "dmar0").mkdir()
    assert iommu_state(str(cmd), str(sysfs))[0] == "on"
    cmd.write_text("root=/dev/sda1 intel_iommu=on iommu=pt\n")
    assert iommu_state(str(cmd), str(sysfs))[0] == "passthrough"
    cmd.write_text("root=/dev/sda1 amd_iommu=off\n")
    assert iommu_state(str(cmd), str(sysfs))[0] == "off"
    assert iommu_state(str(tmp_path / "nope"), str(tmp_path / "nope2"))[0] == "unknown"
    assert shm_size(str(tmp_path)) > 0 and shm_size(str(tmp_path / "nope")) is None


def test_detect_without_nvml_says_so():
    from sglang_eagle3_ext.launch.topology import detect

    t = detect()
    if t.source == "nvml":
        pytest.skip("NVML present here")
    assert t.classify() == TopologyClass.NO_GPU and "NVML" in t.note
