"""`sglang-eagle3 patches [--list | --print RELEASE | --path RELEASE]`: the static patches for baked SGLang images.

The diffs (`patches/RELEASE/sglang-eagle3-ext.patch`, how to apply them: patches/README.md) ship inside the
package, so wheel users get them too:

    sglang-eagle3 patches --print 0.5.16 > sge3.patch
    cd "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" && patch -p1 --forward --fuzz=0 < sge3.patch
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..compat.options import PatchesOptions
from ..options.parser import add_options, options_from
from . import common as cli_common

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


def _sort_key(v: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def find(release: str, flag: str = "--print") -> Path:
    have = releases()
    if release not in have:
        raise cli_common.CliError(
            f"{flag} {release}: no static patch for this SGLang release; give one of "
            f"{', '.join(sorted(have, key=_sort_key)) or 'none'} "
            f"(other releases: the runtime route, SGLANG_EAGLE3_EXT=1, needs no patch)"
        )
    return have[release]


def main(argv=None) -> int:
    ap = cli_common.parser("patches", __doc__)
    add_options(ap.add_mutually_exclusive_group(), PatchesOptions)
    o = options_from(cli_common.finish(ap, "patches").parse_args(argv), PatchesOptions)
    if o.print_release:
        sys.stdout.write(find(o.print_release).read_text())
    elif o.path:
        print(find(o.path, "--path"))
    else:
        for rel, f in sorted(releases().items(), key=lambda kv: _sort_key(kv[0])):
            print(f"{rel:10} {f}")
    return cli_common.EXIT_OK


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("patches", main))
