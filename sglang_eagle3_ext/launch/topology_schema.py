"""What a topology file (`launch_server --topology-file`, `Topology.to_json`) must hold, field by field.

Checked with boundary.field at the boundary, so nothing that classifies or prints a topology meets a wrong type.
"""

from __future__ import annotations

from ..boundary import BadInput, field

# nvmlDeviceGetTopologyCommonAncestor -> the nvidia-smi topo names
ANCESTOR_NAMES = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlDeviceGetP2PStatus results
P2P_STATUS_NAMES = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
}

# JSON key -> (types, boundary.field options): what each field of a topology file must hold
_OPT_STR = (str, type(None))
_COUNT = dict(minimum=0, maximum=1 << 62)
GPU_FIELDS = {
    "index": (int, _COUNT),
    "name": (str, {}),
    "uuid": (str, {}),
    "pci_bus_id": (str, {}),
    "compute_capability": (str, {}),
    "pcie_gen": ((int, type(None)), _COUNT),
    "pcie_width": ((int, type(None)), _COUNT),
}
LINK_FIELDS = {
    "a": (int, _COUNT),
    "b": (int, _COUNT),
    "pcie_path": (str, dict(choices=tuple(ANCESTOR_NAMES.values()))),
    "nvlink": (bool, {}),
    "p2p_read": (str, dict(choices=(*P2P_STATUS_NAMES.values(), "UNKNOWN"))),
    "p2p_write": (str, dict(choices=(*P2P_STATUS_NAMES.values(), "UNKNOWN"))),
}
TOPOLOGY_FIELDS = {
    "nvswitch": ((bool, type(None)), {}),
    "driver_version": (_OPT_STR, {}),
    "nccl_version": (_OPT_STR, {}),
    "nccl_version_source": (_OPT_STR, {}),
    "shm_bytes": ((int, type(None)), _COUNT),
    "iommu": (str, dict(choices=("off", "on", "passthrough", "unknown"))),
    "iommu_evidence": (str, {}),
    "source": (str, {}),
    "note": (str, {}),
}
_REQUIRED = {"index", "a", "b", "pcie_path"}


def checked(obj, spec: dict, where: str) -> dict:
    """The keys of `obj` that `spec` names, each checked; unknown keys refused (a typo must not pass)."""
    if not isinstance(obj, dict):
        raise BadInput(where, f"expected an object (mapping), got {type(obj).__name__}")
    extra = {"gpus", "links"} if spec is TOPOLOGY_FIELDS else set()
    unknown = sorted(set(obj) - set(spec) - extra)
    if unknown:
        raise BadInput(where, f"unknown keys {unknown} (known: {sorted(set(spec) | extra)})")
    return {
        key: field(obj, key, types, where, **opts)
        for key, (types, opts) in spec.items()
        if key in obj or key in _REQUIRED
    }


def listed(d: dict, key: str, where: str) -> list:
    return field(d, key, list, where, optional=True, default=[])
