"""What `check` and `convert` take; each field with a command line is declared here once
(`options.schema.flag`), and `cli/check.py`, `cli/convert.py` derive their parsers from it. The SGLang release
(`--sglang`) is the flag every tool shares (options/values.py)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..boundary import Refused
from ..options import values
from ..options.schema import flag
from .hub import looks_like_hub_id


def _int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 3,31,59, got {s!r}") from None


@dataclasses.dataclass(kw_only=True)
class CheckOptions:
    """What `check` reads: the draft, what it is checked against, and how deeply."""

    draft: str = flag(names="draft", help="the draft checkpoint folder (config.json + *.safetensors)")
    target: str | None = flag(
        None,
        type=values.folder_in("give the target model's folder (its config.json)"),
        help="target model dir (its config.json; its lm_head when the draft shares it): hidden/vocab/layer checks",
    )
    data: str | None = flag(
        None,
        type=values.folder_in("give the dump dir or `dump export` output the draft was trained on"),
        help="the draft's training data (a dump dir or a `dump export` output): the target layers a server feeds "
        "the draft must be the ones it holds",
    )
    scan_values: bool = flag(
        True,
        names="--headers-only",
        action="store_false",
        aliases=("--no-scan-values", ("--scan-values", "store_true")),
        help="fast: read headers only, no NaN/Inf scan of the weights (the verdict says 'values not "
        "scanned'); default: every weight is read once",
    )

    def check_local(self) -> None:
        """DRAFT names a folder here or a hub id (org/name): a bad path is bad input, not a verdict on a draft."""
        draft = Path(self.draft)
        if draft.exists() and not draft.is_dir():
            raise Refused(f"{self.draft}: is a file, not a draft folder (config.json + *.safetensors); name its folder")
        if not draft.exists() and not looks_like_hub_id(self.draft):
            raise Refused(f"{self.draft}: no such directory (and not a hub id org/name)")


@dataclasses.dataclass(kw_only=True)
class ConvertOptions:
    """What `convert` reads and writes."""

    src: str = flag(
        names="src",
        type=values.folder_in("give the draft's checkpoint folder (config.json + weights)"),
        help="the draft to convert (speculators / SpecForge / EAGLE checkpoint folder)",
    )
    dst: str = flag(
        names="dst",
        type=values.folder_out("give a new or empty folder (--force replaces an earlier output of convert)"),
        help="output folder (must be empty or absent, or --force)",
    )
    hf_indices: list[int] | None = flag(
        None, type=_int_list, help="HF hidden_states indices the draft was trained on, e.g. 3,31,59"
    )
    force: bool = flag(False, action="store_true", help="replace a non-empty DST")
    allow_pickle: bool = flag(False, action="store_true", help="read .bin/.pt sources (torch.load weights_only=True)")
