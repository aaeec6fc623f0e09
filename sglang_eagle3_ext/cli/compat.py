"""Pre-upgrade check: which of our patches a SGLang release can take, without importing SGLang.

    python -m sglang_eagle3_ext.compat                      # the installed release
    python -m sglang_eagle3_ext.compat --sglang 0.5.24 --download   # a named release (wheel, no deps)
    python -m sglang_eagle3_ext.compat --source DIR [--sglang X]    # an unpacked tree (DIR/sglang or DIR)

How each target is found: compat/release.py. Exit status: 0 supported, 1 unsupported, 2 the release could
not be obtained.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..boundary import BadInput, regular_file
from ..compat.release import CACHE_ENV, ReleaseUnavailable, check_source, format_report, release_root
from ..options.values import file_in, folder_in
from ..versions import parse
from . import common as cli_common


def build_parser():
    ap = cli_common.parser("compat", cli_common.doc_description(__doc__))
    cli_common.add_sglang_release(ap, "check this release", dest="sglang")
    ap.add_argument("--download", action="store_true", help="download the release's wheel (no deps) if not cached")
    src = ap.add_mutually_exclusive_group()
    src.add_argument(
        "--source",
        metavar="DIR",
        type=folder_in("give an unpacked SGLang tree"),
        help="an unpacked SGLang tree (DIR/sglang or the sglang dir)",
    )
    src.add_argument(
        "--wheel",
        metavar="FILE",
        type=file_in("give a SGLang wheel file (sglang-VERSION-*.whl)"),
        help="this SGLang wheel file (its version from the file name)",
    )
    ap.add_argument(
        "--wheel-dir",
        action="append",
        default=[],
        type=folder_in("give a folder holding sglang-VERSION-*.whl files"),
        metavar="DIR",
        help=f"also look for sglang-VERSION-*.whl here (cache: ${CACHE_ENV} or ~/.cache/sglang_eagle3_ext)",
    )
    cli_common.add_json_out(ap, "the report")
    return cli_common.finish(ap, "compat")


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        _check_local_inputs(a)  # before any download: a typo must not cost a network wait
        root, version = release_root(
            source=a.source, wheel=a.wheel, version=a.sglang, download=a.download, wheel_dirs=a.wheel_dir
        )
        rep = check_source(root, version)
    except ReleaseUnavailable as e:
        print(cli_common.error_line("compat", str(e)), file=sys.stderr)
        return cli_common.EXIT_BAD_INPUT
    if a.json:
        cli_common.write_json(a.json, rep.as_dict())
    if a.json != "-":
        print(format_report(rep))
    return 0 if rep.supported else 1


def _check_local_inputs(a) -> None:

    if a.sglang is not None and (not parse(a.sglang) or "/" in a.sglang or a.sglang != a.sglang.strip()):
        raise ReleaseUnavailable(f"--sglang {a.sglang!r}: not a release number (e.g. 0.5.16)")
    for d in a.wheel_dir:
        if not Path(d).is_dir():
            raise ReleaseUnavailable(f"--wheel-dir {d}: no such folder")
    if a.source is not None and not Path(a.source).is_dir():
        raise ReleaseUnavailable(f"--source {a.source}: no such folder")
    if a.wheel is not None:
        try:
            regular_file(a.wheel, "wheel")
        except BadInput as e:
            raise ReleaseUnavailable(f"--wheel {e}") from None
    if a.json not in (None, "-") and not Path(a.json).resolve().parent.is_dir():
        raise ReleaseUnavailable(f"--json {a.json}: its folder does not exist")


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("compat", main))
