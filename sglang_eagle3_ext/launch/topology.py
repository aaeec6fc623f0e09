"""GPU-to-GPU topology without a CUDA context: NVML (nvidia-ml-py, imported lazily) plus a few host facts.

`detect()` never raises: without NVML (CPU box, container without the driver) it returns a
Topology with no GPUs and `note` saying why. `Topology.to_json/from_json` round-trip, which is
how `--topology-file` and the tests feed fake machines.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from pathlib import Path

from .. import envs
from ..boundary import BadInput, parse_json, read_json_file
from .topology_schema import ANCESTOR_NAMES, GPU_FIELDS, LINK_FIELDS, P2P_STATUS_NAMES, TOPOLOGY_FIELDS, checked, listed

SWITCH_PATHS = ("INTERNAL", "PIX", "PXB")  # P2P stays below the CPU: NCCL uses P2P by default
CPU_PATHS = ("PHB", "NODE", "SYS")  # through the CPU: NCCL >= 2.23.4 uses SHM at 3+ GPUs


class TopologyClass(str, enum.Enum):
    NO_GPU = "no GPU / NVML unavailable"
    SINGLE_GPU = "single GPU"
    NVLINK = "full NVLink"
    PCIE_SWITCH = "PCIe behind switches"
    PCIE_CPU = "PCIe through CPU"
    NO_P2P = "no P2P"
    MIXED = "mixed"

    @property
    def is_pcie(self) -> bool:
        return self in (TopologyClass.PCIE_SWITCH, TopologyClass.PCIE_CPU, TopologyClass.NO_P2P, TopologyClass.MIXED)


@dataclasses.dataclass
class GPU:
    index: int  # NVML index (PCI bus order)
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    compute_capability: str = ""  # "9.0", "12.0"
    pcie_gen: int | None = None
    pcie_width: int | None = None

    @property
    def sm(self) -> int | None:
        m = re.match(r"(\d+)\.(\d+)", self.compute_capability or "")
        return int(m.group(1)) * 10 + int(m.group(2)) if m else None


@dataclasses.dataclass
class Link:
    a: int
    b: int
    pcie_path: str  # PIX/PXB/PHB/NODE/SYS (common PCIe ancestor)
    nvlink: bool = False
    p2p_read: str = "OK"
    p2p_write: str = "OK"

    @property
    def p2p_ok(self) -> bool:  # NCCL gates P2P on READ and WRITE
        return self.p2p_read == "OK" and self.p2p_write == "OK"

    @property
    def label(self) -> str:
        return "NV" if self.nvlink else self.pcie_path


@dataclasses.dataclass
class Topology:
    gpus: list[GPU] = dataclasses.field(default_factory=list)
    links: list[Link] = dataclasses.field(default_factory=list)
    nvswitch: bool | None = None  # NVLinks end on an NVSwitch (NVLS possible); None: unknown
    driver_version: str | None = None
    nccl_version: str | None = None
    nccl_version_source: str | None = None
    shm_bytes: int | None = None
    iommu: str = "unknown"  # off | on | passthrough | unknown
    iommu_evidence: str = ""
    source: str = "nvml"  # nvml | file:PATH | none
    note: str = ""

    # --- JSON ---
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d, where: str = "topology JSON") -> "Topology":
        """Checked field by field (boundary.BadInput naming `where` and the key): nothing later trusts it."""
        if not isinstance(d, dict):
            raise BadInput(where, f"top level must be an object of topology fields, got {type(d).__name__}")
        fields = checked(d, TOPOLOGY_FIELDS, where)
        gpus, seen = [], set()
        for i, g in enumerate(listed(d, "gpus", where)):
            gpu = GPU(**checked(g, GPU_FIELDS, f"{where}: gpus[{i}]"))
            if gpu.index in seen:
                raise BadInput(f"{where}: gpus[{i}]", f"GPU index {gpu.index} is listed twice")
            seen.add(gpu.index)
            gpus.append(gpu)
        links = [
            Link(**checked(lk, LINK_FIELDS, f"{where}: links[{i}]")) for i, lk in enumerate(listed(d, "links", where))
        ]
        return cls(gpus=gpus, links=links, **fields)

    @classmethod
    def from_json(cls, text: str, where: str = "topology JSON") -> "Topology":
        return cls.from_dict(parse_json(text, where, "topology JSON", expect=None), where)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Topology":
        where = str(path)
        topo = cls.from_dict(read_json_file(path, "topology file", expect=None, max_bytes=16 << 20), where)
        topo.source = f"file:{path}"
        return topo

    # --- queries ---
    def link(self, a: int, b: int) -> Link | None:
        for lk in self.links:
            if {lk.a, lk.b} == {a, b}:
                return lk
        return None

    def subset(self, indices: list[int]) -> "Topology":
        """The same machine seen by a group of GPUs (e.g. the TP group)."""
        keep = set(indices)
        return dataclasses.replace(
            self,
            gpus=[g for g in self.gpus if g.index in keep],
            links=[lk for lk in self.links if lk.a in keep and lk.b in keep],
        )

    def classify(self) -> TopologyClass:
        if not self.gpus:
            return TopologyClass.NO_GPU
        if len(self.gpus) == 1:
            return TopologyClass.SINGLE_GPU
        links = [self.link(a.index, b.index) for i, a in enumerate(self.gpus) for b in self.gpus[i + 1 :]]
        if any(lk is None for lk in links):
            return TopologyClass.MIXED  # incomplete description: assume the worst mix
        if all(lk.nvlink for lk in links):
            return TopologyClass.NVLINK
        if any(lk.nvlink for lk in links):
            return TopologyClass.MIXED
        if not any(lk.p2p_ok for lk in links):
            return TopologyClass.NO_P2P
        if not all(lk.p2p_ok for lk in links):
            return TopologyClass.MIXED
        if all(lk.pcie_path in SWITCH_PATHS for lk in links):
            return TopologyClass.PCIE_SWITCH
        if all(lk.pcie_path in CPU_PATHS for lk in links):
            return TopologyClass.PCIE_CPU
        return TopologyClass.MIXED

    def matrix(self) -> str:
        """nvidia-smi-topo-like matrix; P2P refused pairs carry a '!' mark."""
        if not self.gpus:
            return "(no GPUs)"
        idx = [g.index for g in self.gpus]
        head = "      " + "".join(f"GPU{i:<4}" for i in idx)
        rows = [head]
        for a in idx:
            cells = []
            for b in idx:
                lk = self.link(a, b)
                cells.append(
                    "X" if a == b else "?" if lk is None else lk.label + ("" if lk.p2p_ok or lk.nvlink else "!")
                )
            rows.append(f"GPU{a:<3}" + "".join(f"{c:<7}" for c in cells))
        return "\n".join(rows)

    def summary(self) -> str:
        cls = self.classify()
        lines = [
            f"topology: {cls.value} ({len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}, source {self.source})"
        ]
        if self.note:
            lines.append(f"  note: {self.note}")
        for g in self.gpus:
            pcie = f", PCIe gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen else ""
            lines.append(f"  GPU{g.index}: {g.name or '?'} sm{g.sm or '?'} {g.pci_bus_id}{pcie}")
        if len(self.gpus) > 1:
            lines += ["  " + r for r in self.matrix().splitlines()]
            lines.append("  ('!' = P2P read/write not OK per NVML; NV = NVLink)")
        lines.append(
            f"  NVSwitch: {_tri(self.nvswitch)}; driver: {self.driver_version or '?'}; "
            f"NCCL: {self.nccl_version or 'unknown'}"
            + (f" ({self.nccl_version_source})" if self.nccl_version_source else "")
        )
        shm = f"{self.shm_bytes / 2**30:.1f} GiB" if self.shm_bytes is not None else "unknown"
        lines.append(
            f"  /dev/shm: {shm}; IOMMU: {self.iommu}" + (f" ({self.iommu_evidence})" if self.iommu_evidence else "")
        )
        return "\n".join(lines)


def _tri(v: bool | None) -> str:
    return "unknown" if v is None else "yes" if v else "no"


# ---------------------------------------------------------------- host facts


def shm_size(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
        return st.f_blocks * st.f_frsize
    except OSError:
        return None


def iommu_state(cmdline_path: str = "/proc/cmdline", sysfs: str = "/sys/class/iommu") -> tuple[str, str]:
    """(state, evidence). Kernel cmdline wins over sysfs: iommu=pt / *_iommu=off are explicit choices."""
    try:
        cmdline = Path(cmdline_path).read_text()
    except OSError:
        cmdline = ""
    toks = cmdline.split()
    if any(t in ("iommu=pt", "iommu.passthrough=1") for t in toks):
        return "passthrough", "kernel cmdline iommu=pt"
    if any(t in ("intel_iommu=off", "amd_iommu=off", "iommu=off") for t in toks):
        return "off", "kernel cmdline *_iommu=off"
    try:
        units = sorted(os.listdir(sysfs))
    except OSError:
        units = None
    if units:
        return "on", f"{sysfs} has {len(units)} unit(s)"
    if any(t in ("intel_iommu=on", "amd_iommu=on") for t in toks):
        return "on", "kernel cmdline *_iommu=on"
    if units == []:
        return "off", f"{sysfs} empty"
    return "unknown", "not readable"


def nccl_version() -> tuple[str | None, str | None]:
    """(version, how). Neither route creates a CUDA context (ncclGetVersion needs none).

    1. torch.cuda.nccl.version(): the NCCL that torch (and so SGLang) actually loads; only when
       torch is importable and CUDA-built.  2. ctypes on the pip `nvidia-nccl-cu*` library.
    """
    try:
        import torch

        v = torch.cuda.nccl.version()
        if isinstance(v, tuple):
            return ".".join(str(x) for x in v[:3]), "torch.cuda.nccl.version()"
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}", "torch.cuda.nccl.version()"
    except Exception:  # noqa: BLE001 - CPU torch / no torch: try the library
        pass
    try:
        import ctypes
        import importlib.util

        spec = importlib.util.find_spec("nvidia.nccl")
        if spec and spec.submodule_search_locations:
            lib = Path(list(spec.submodule_search_locations)[0]) / "lib" / "libnccl.so.2"
            nccl = ctypes.CDLL(str(lib))
            v = ctypes.c_int()
            if nccl.ncclGetVersion(ctypes.byref(v)) == 0:
                code = v.value
                return f"{code // 10000}.{code // 100 % 100}.{code % 100}", str(lib)
    except Exception:  # noqa: BLE001
        pass
    return None, None


def _host_facts(topo: Topology) -> Topology:
    topo.shm_bytes = shm_size()
    topo.iommu, topo.iommu_evidence = iommu_state()
    topo.nccl_version, topo.nccl_version_source = nccl_version()
    return topo


# ---------------------------------------------------------------- NVML


def _s(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


# nvmlGpuP2PCapsIndex_t. Our own constants: nvidia-ml-py 13 defines NVML_P2P_CAPS_INDEX_READ as the
# tuple (0,) (a trailing comma), which ctypes refuses ("Don't know how to convert parameter 3").
P2P_INDEX_READ, P2P_INDEX_WRITE, P2P_INDEX_NVLINK = 0, 1, 2


def _nvswitch(nv, handles) -> bool | None:
    """True if any active NVLink of the first GPU ends on an NVSwitch; None if NVML can't say."""
    try:
        h = handles[0]
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nv.nvmlDeviceGetNvLinkState(h, link) != nv.NVML_FEATURE_ENABLED:
                    continue
                return nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link) == getattr(
                    nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2
                )
            except nv.NVMLError:
                continue
        return False
    except Exception:  # noqa: BLE001
        return None


def detect(with_host_facts: bool = True) -> Topology:
    """Read the machine through NVML. Never raises; no GPUs + `note` when NVML is unavailable."""
    try:
        import pynvml as nv
    except ImportError:
        topo = Topology(source="none", note="NVML unavailable: nvidia-ml-py not installed (pip install nvidia-ml-py)")
        return _host_facts(topo) if with_host_facts else topo
    try:
        nv.nvmlInit()
    except Exception as e:  # noqa: BLE001 - no driver / library
        topo = Topology(source="none", note=f"NVML unavailable: {e}")
        return _host_facts(topo) if with_host_facts else topo
    try:
        topo = Topology(source="nvml")
        topo.driver_version = _s(nv.nvmlSystemGetDriverVersion())
        n = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        for i, h in enumerate(handles):
            g = GPU(
                index=i,
                name=_s(nv.nvmlDeviceGetName(h)),
                uuid=_s(nv.nvmlDeviceGetUUID(h)),
                pci_bus_id=_s(nv.nvmlDeviceGetPciInfo(h).busId),
            )
            try:
                g.compute_capability = "%d.%d" % nv.nvmlDeviceGetCudaComputeCapability(h)
                g.pcie_gen = nv.nvmlDeviceGetCurrPcieLinkGeneration(h)
                g.pcie_width = nv.nvmlDeviceGetCurrPcieLinkWidth(h)
            except nv.NVMLError:
                pass
            topo.gpus.append(g)
        for i in range(n):
            for j in range(i + 1, n):
                a, b = handles[i], handles[j]

                def p2p(idx, a=a, b=b):
                    try:
                        return P2P_STATUS_NAMES.get(nv.nvmlDeviceGetP2PStatus(a, b, idx), "UNKNOWN")
                    except Exception:  # noqa: BLE001 - NVMLError, or ctypes errors of odd bindings
                        return "UNKNOWN"

                try:
                    anc = ANCESTOR_NAMES.get(nv.nvmlDeviceGetTopologyCommonAncestor(a, b), "SYS")
                except nv.NVMLError:
                    anc = "SYS"
                topo.links.append(
                    Link(
                        a=i,
                        b=j,
                        pcie_path=anc,
                        nvlink=p2p(P2P_INDEX_NVLINK) == "OK",
                        p2p_read=p2p(P2P_INDEX_READ),
                        p2p_write=p2p(P2P_INDEX_WRITE),
                    )
                )
        if any(lk.nvlink for lk in topo.links):
            topo.nvswitch = _nvswitch(nv, handles)
        elif n:
            topo.nvswitch = False
    except Exception as e:  # noqa: BLE001
        topo = Topology(source="none", note=f"NVML query failed: {type(e).__name__}: {e}")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return _host_facts(topo) if with_host_facts else topo


def visible_indices(topo: Topology, env=None) -> list[int]:
    """NVML indices of the GPUs CUDA will see. Integer CUDA_VISIBLE_DEVICES assume PCI bus order
    (CUDA_DEVICE_ORDER=PCI_BUS_ID, which is also what NVML uses); UUIDs are matched exactly."""
    cvd = envs.external("CUDA_VISIBLE_DEVICES", env=env)
    all_idx = [g.index for g in topo.gpus]
    if cvd is None:
        return all_idx
    out = []
    for tok in (t.strip() for t in cvd.split(",") if t.strip()):
        if re.fullmatch(r"[0-9]+", tok):  # str.isdigit() also takes '²', which int() refuses
            if int(tok) in all_idx:
                out.append(int(tok))
        else:
            out += [g.index for g in topo.gpus if g.uuid and g.uuid.startswith(tok)]
    return out


def group_of(topo: Topology, n: int, base_gpu_id: int = 0, env=None) -> Topology:
    """The topology of the `n` GPUs a TP group starting at `base_gpu_id` would use."""
    vis = visible_indices(topo, env)
    return topo.subset(vis[base_gpu_id : base_gpu_id + n])
