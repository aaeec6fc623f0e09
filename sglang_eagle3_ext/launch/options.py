"""The launcher's own options; each is declared here once (`options.schema.flag`), in the order `launch --help`
lists them, and `cli/launch.py` derives its parser from it. Every other argument goes to SGLang unchanged."""

from __future__ import annotations

import dataclasses

from ..options import values
from ..options.schema import flag
from .nccl import PROFILES
from .preset_files import preset as preset_arg

# the launcher's settings a preset's eagle3_ext section may give too: checked as the flag checks its value
# (preset_schema.launcher_text); the flag given wins, then the preset, then the default
PRESET_KEYS = ("nccl_profile", "loopback_only")


@dataclasses.dataclass(kw_only=True)
class LaunchOptions:
    """The launcher's own choices (the command line's namespace has the same attributes)."""

    # a shipped preset's name (--preset and --config exclude each other)
    preset: str | None = flag(
        None, metavar="NAME", type=preset_arg, help="a server_configs/NAME.yaml preset (see --list-presets)"
    )
    # or a preset-format YAML file
    config: str | None = flag(
        None,
        metavar="FILE",
        type=values.file_in("give a preset-format YAML file"),
        help="a preset-format YAML file (SGLang --config files work too)",
    )
    list_presets: bool = flag(False, action="store_true", help="print the shipped presets and exit")
    # auto | pcie | nvlink | off; None: the preset's, else auto
    nccl_profile: str | None = flag(
        None, choices=PROFILES, help="auto (default): from the detected topology; pcie/nvlink: force; off: set nothing"
    )
    preflight: bool = flag(
        False, action="store_true", help="all-reduce check across the TP group's GPUs before starting SGLang"
    )
    loopback_only: bool = flag(
        False,
        action="store_true",
        help="single node: NCCL/gloo bootstrap on lo and IB off (breaks cross-node groups such as RLHF "
        "weight sync; preset key loopback_only)",
    )
    preflight_timeout: float = flag(
        120.0,
        type=values.positive_float,
        metavar="S",
        help="seconds per preflight attempt (default 120; a hang is retried once with NCCL_P2P_DISABLE=1)",
    )
    # plan only: what this machine would refuse is a warning where it can be
    dry_run: bool = flag(
        False,
        action="store_true",
        help="print topology, decisions and the SGLang command; start nothing (works without GPUs)",
    )
    dump_dir: str | None = flag(
        None,
        metavar="DIR",
        # permissions are the plan's to weigh: a warning in a dry run, a refusal before a launch writes anything
        type=values.folder_out("give a folder to dump into (new, or a dump with the same settings)", False),
        help="dump prefill hidden states into DIR (made if missing; replaces a preset's dump_dir; "
        "passed to SGLang's processes as SGLANG_EAGLE3_EXT_DUMP_DIR)",
    )
    # a topology JSON instead of NVML
    topology_file: str | None = flag(
        None,
        metavar="F",
        type=values.file_in("give a topology JSON file (`launch --dump-topology` writes one)"),
        help="read the topology from JSON instead of NVML",
    )
    dump_topology: bool = flag(False, action="store_true", help="print the detected topology as JSON and exit")
    skip_draft_check: bool = flag(
        False, action="store_true", help="do not run `check` on --speculative-draft-model-path before starting SGLang"
    )
