"""sglang-eagle3-ext: EAGLE-3 for DeepSeek-V3-class MoE targets on SGLang.

    import sglang_eagle3_ext; sglang_eagle3_ext.apply()     # explicit
    SGLANG_EAGLE3_EXT=1 python -m sglang.launch_server ...   # every SGLang process, via the .pth

Nothing heavy is imported here.
"""

from __future__ import annotations

__version__ = "0.1.0"


def apply(features=None) -> list[str]:
    """Apply the patches of `features` (default: from the environment); returns names newly applied."""
    from ._activate import apply as _apply

    return _apply(features)


def revert() -> list[str]:
    """Restore every original SGLang attribute patched in this process."""
    from ._activate import revert as _revert

    return _revert()


def applied_patches() -> list[str]:
    """Names (see patch_table.PATCHES) of the patches active in this process."""
    from .patching import active

    return active()


__all__ = ["apply", "revert", "applied_patches", "__version__"]
