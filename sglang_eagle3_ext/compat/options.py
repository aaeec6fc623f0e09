"""What `compat` and `patches` take; each field with a command line is declared here once
(`options.schema.flag`), and `cli/compat.py`, `cli/patches.py` derive their parsers from it. The release to
check (`--sglang`) is the flag every tool shares (options/values.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..boundary import BadInput, regular_file
from ..options import values
from ..options.schema import flag
from ..versions import parse
from .release import CACHE_ENV, ReleaseUnavailable


@dataclasses.dataclass(kw_only=True)
class CompatOptions:
    """Where the release to check comes from."""

    download: bool = flag(False, action="store_true", help="download the release's wheel (no deps) if not cached")
    source: str | None = flag(
        None,
        metavar="DIR",
        type=values.folder_in("give an unpacked SGLang tree"),
        help="an unpacked SGLang tree (DIR/sglang or the sglang dir)",
    )
    wheel: str | None = flag(
        None,
        metavar="FILE",
        type=values.file_in("give a SGLang wheel file (sglang-VERSION-*.whl)"),
        help="this SGLang wheel file (its version from the file name)",
    )
    wheel_dir: list[str] = flag(
        default_factory=list,
        action="append",
        type=values.folder_in("give a folder holding sglang-VERSION-*.whl files"),
        metavar="DIR",
        help=f"also look for sglang-VERSION-*.whl here (cache: ${CACHE_ENV} or ~/.cache/sglang_eagle3_ext)",
    )

    def check_local(self, release: str | None, json: str | None) -> None:
        """What names a local thing, checked before any download: a typo must not cost a network wait."""
        if release is not None and (not parse(release) or "/" in release or release != release.strip()):
            raise ReleaseUnavailable(f"--sglang {release!r}: not a release number (e.g. 0.5.16)")
        for d in self.wheel_dir:
            if not Path(d).is_dir():
                raise ReleaseUnavailable(f"--wheel-dir {d}: no such folder")
        if self.source is not None and not Path(self.source).is_dir():
            raise ReleaseUnavailable(f"--source {self.source}: no such folder")
        if self.wheel is not None:
            try:
                regular_file(self.wheel, "wheel")
            except BadInput as e:
                raise ReleaseUnavailable(f"--wheel {e}") from None
        if json not in (None, "-") and not Path(json).resolve().parent.is_dir():
            raise ReleaseUnavailable(f"--json {json}: its folder does not exist")


@dataclasses.dataclass(kw_only=True)
class PatchesOptions:
    """Which static patch (patches/RELEASE/*.patch) to show; none: list them."""

    list: bool = flag(False, action="store_true", help="list the releases that have a patch (the default action)")
    print_release: str | None = flag(
        None, names="--print", metavar="RELEASE", help="print that release's patch to stdout"
    )
    path: str | None = flag(None, metavar="RELEASE", help="print the file path of that release's patch")
