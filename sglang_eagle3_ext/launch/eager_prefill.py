"""`eagle3_ext: eager_prefill: true`: prefills run outside CUDA graphs (the dump reads eager prefills; see
in_server/dump/prefill_graphs.py), through the switch the installed release has. Read from its ServerArgs fields, not its
version: 0.5.14+ turns prefill graphs off and keeps decode graphs; 0.5.10's only prefill graph is the torch.compile
piecewise one."""

from __future__ import annotations

from .nccl import Decision
from .preset_schema import EXT_SECTION, PresetError

SWITCHES = (
    ("disable_prefill_cuda_graph", "prefill CUDA graphs off (decode graphs stay on)"),
    ("disable_piecewise_cuda_graph", "the piecewise (torch.compile) prefill graph off"),
)


def decision(preset, fields, user: set[str]) -> Decision | None:
    """The SGLang flag that makes prefills eager, as a launch decision; None when the preset does not ask."""
    if preset is None or not preset.ext.get("eager_prefill"):
        return None
    for field, what in SWITCHES:
        if field in fields:
            flag = "--" + field.replace("_", "-")
            why = f"preset {EXT_SECTION}.eager_prefill (the dump reads eager prefills): {what}"
            return (
                Decision(flag, None, why + "; yours kept", kind="arg", action="user")
                if field in user
                else Decision(flag, "", why, kind="arg")
            )
    raise PresetError(
        f"{preset.where}: {EXT_SECTION}.eager_prefill: this SGLang has none of "
        f"{', '.join(f for f, _ in SWITCHES)}; run `sglang-eagle3 compat` and report it"
    )
