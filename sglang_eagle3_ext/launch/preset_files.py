"""Where launch presets are: the shipped ones by name (server_configs/NAME.yaml), a preset file by path, and the
argparse type of `--preset` that tells them apart. What a preset must hold: preset_schema.py; reading one:
presets.py."""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path

from ..options import values


class PresetError(ValueError):
    pass


def names_a_file(name: str) -> bool:
    """`--preset` takes a shipped preset's name or a preset file (one `tune` wrote, say)."""
    return os.sep in name or name.endswith((".yaml", ".yml"))


def preset_dirs() -> list[Path]:
    """Installed wheel: sglang_eagle3_ext/server_configs (hatch force-include); checkout: <repo>/server_configs."""
    pkg = Path(__file__).resolve().parent.parent
    return [d for d in (pkg / "server_configs", pkg.parent / "server_configs") if d.is_dir()]


def available_presets() -> list[str]:
    return sorted({p.stem for d in preset_dirs() for p in d.glob("*.yaml")})


def find_preset(name: str) -> Path:
    for d in preset_dirs():
        p = d / f"{name}.yaml"
        if p.is_file():
            return p
    names = available_presets()
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise PresetError(
        f"no preset {name!r}{hint} (available: {', '.join(names) or 'none'}; "
        f"looked in {', '.join(map(str, preset_dirs())) or 'no server_configs folder'})"
    )


def preset(text: str) -> str:
    """A launch preset: a shipped preset's name or a preset file (its content is checked where it is loaded,
    against the installed SGLang)."""
    if names_a_file(text):
        return values.file_in(
            "give a preset YAML file, or a shipped preset's name (`sglang-eagle3 launch --list-presets`)"
        )(text)
    try:
        find_preset(text)
    except PresetError as e:
        raise argparse.ArgumentTypeError(f"{e}; give a shipped preset's name or a preset file") from None
    return text
