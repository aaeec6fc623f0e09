"""Which NCCL profile a launch runs: `--nccl-profile` on the command line, else the preset's `nccl_profile`
checked against the detected topology, else auto.

A preset written for one kind of machine forces its profile; run on the other kind it would silently undo what
the hardware offers (the PCIe profile turns custom all-reduce and NVLS off on an NVSwitch box) or keep what it
lacks (the NVLink profile leaves custom all-reduce on over PCIe). So the contradiction is refused, naming the
preset, the detected class and the fix. The command line is the user's word about their machine: it beats the
detection, and the plan says so once.
"""

from __future__ import annotations

import dataclasses

from ..boundary import Refused
from .nccl import Decision
from .topology import Topology, TopologyClass

NAME = "(nccl profile)"
# what the forced profile would do wrong on the other kind of machine
_HARM = {
    "pcie": "its PCIe settings would turn custom all-reduce and NVLS off",
    "nvlink": "its NVLink settings would keep custom all-reduce and FlashInfer all-reduce fusion on over PCIe",
}


class ProfileConflict(Refused):
    """A preset's forced profile contradicts the detected topology (the message names both and the fix; exit 2)."""


@dataclasses.dataclass(frozen=True)
class Choice:
    profile: str  # auto | pcie | nvlink | off
    forced_by: str | None  # how the plan names who forced it ("--nccl-profile pcie", "preset X"), None: auto
    decision: Decision | None  # the one line the plan shows about it


def contradiction(profile: str, cls: TopologyClass) -> bool:
    """The profile is for the other kind of machine than the one detected (unknown machines contradict nothing)."""
    if profile == "pcie":
        return cls == TopologyClass.NVLINK
    if profile == "nvlink":
        return cls.is_pcie
    return False


def describe(topo: Topology) -> str:
    cls = topo.classify()
    switch = ", NVSwitch" if cls == TopologyClass.NVLINK and topo.nvswitch else ""
    return f"{cls.value}{switch} ({len(topo.gpus)} GPUs of the TP group, source {topo.source})"


def twin(preset_name: str, profile: str, available) -> str | None:
    """The shipped preset for the other kind of machine: NAME-pcie <-> NAME-nvlink."""
    other = {"pcie": "nvlink", "nvlink": "pcie"}.get(profile)
    suffix = f"-{profile}"
    if other and preset_name.endswith(suffix):
        name = preset_name[: -len(suffix)] + f"-{other}"
        return name if name in available else None
    return None


def choose(command_line: str | None, preset, topo: Topology, available=()) -> Choice:
    """`preset`: presets.Preset or None; `topo`: the TP group's topology; `available`: shipped preset names."""
    forced = (preset.ext.get("nccl_profile") if preset else None) or "auto"
    cls = topo.classify()
    if command_line:
        return _from_command_line(command_line, forced, preset, topo)
    if forced in ("auto", "off"):
        by = f"preset {preset.name}" if preset and forced == "off" else None
        return Choice(forced, by, None)
    by = f"preset {preset.name}" if preset.by_name else f"--config {preset.path}"
    if contradiction(forced, cls):
        raise ProfileConflict(_conflict_message(preset, forced, topo, available))
    if cls in (TopologyClass.NO_GPU, TopologyClass.SINGLE_GPU):
        why = (
            f"{by}: nccl_profile {forced}; not checked against the machine ({cls.value}"
            f"{': ' + topo.note if topo.note else ''})"
        )
        return Choice(forced, by, Decision(NAME, forced, why, kind="check", action="warn"))
    why = f"{by}: nccl_profile {forced}, as the detected {describe(topo)}"
    return Choice(forced, by, Decision(NAME, forced, why, kind="check", action="ok"))


def _from_command_line(profile: str, forced: str, preset, topo: Topology) -> Choice:
    by = f"--nccl-profile {profile}"
    over = []
    if contradiction(profile, topo.classify()):
        over.append(f"the detected {describe(topo)}")
    if preset and forced not in ("auto", profile):
        over.append(f"preset {preset.name}'s nccl_profile {forced}")
    if not over:
        return Choice(profile, by if profile != "auto" else None, None)
    why = f"{by} on the command line over {' and '.join(over)}: the command line wins"
    return Choice(profile, by if profile != "auto" else None, Decision(NAME, profile, why, kind="check", action="user"))


def _conflict_message(preset, forced: str, topo: Topology, available) -> str:
    other = twin(preset.name, forced, available) if preset.by_name else None
    fix = (
        f"use --preset {other} on this machine"
        if other
        else f"set eagle3_ext.nccl_profile to auto in {preset.path}, or pass --nccl-profile auto"
        if not preset.by_name
        else "pass --nccl-profile auto to follow the detection"
    )
    return (
        f"{preset.where} forces nccl_profile {forced}, but this machine is {describe(topo)}: {_HARM[forced]}. "
        f"Fix: {fix}; or pass --nccl-profile {forced} to run the preset's {forced} settings here anyway"
    )
