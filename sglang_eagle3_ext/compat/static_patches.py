"""The static patches shipped per SGLang release (patches/RELEASE/sglang-eagle3-ext.patch, for images that bake
SGLang): where they are in a checkout or an installed wheel, and the one of a release. `sglang-eagle3 patches`
(cli/patches.py) prints them."""

from __future__ import annotations

from pathlib import Path

from ..boundary import Refused

PATCH_FILE = "sglang-eagle3-ext.patch"


def patch_dirs() -> list[Path]:
    """Installed wheel: sglang_eagle3_ext/patches (hatch force-include); checkout: <repo>/patches."""
    pkg = Path(__file__).resolve().parent.parent  # the package (wheel) or the checkout (patches/ beside it)
    return [d for d in (pkg / "patches", pkg.parent / "patches") if d.is_dir()]


def releases() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in patch_dirs():
        for f in sorted(d.glob(f"*/{PATCH_FILE}")):
            found.setdefault(f.parent.name, f)
    return found


def sort_key(v: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def find(release: str, flag: str = "--print") -> Path:
    have = releases()
    if release not in have:
        raise Refused(
            f"{flag} {release}: no static patch for this SGLang release; give one of "
            f"{', '.join(sorted(have, key=sort_key)) or 'none'} "
            f"(other releases: the runtime route, SGLANG_EAGLE3_EXT=1, needs no patch)"
        )
    return have[release]
