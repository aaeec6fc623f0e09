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
from ..compat.options import CompatOptions
from ..compat.release import ReleaseUnavailable, check_source, format_report, release_root
from ..options.parser import add_options, options_from
from ..versions import parse
from . import common as cli_common
from .run import run_command


def build_parser():
    ap = cli_common.parser("compat", cli_common.doc_description(__doc__))
    cli_common.add_sglang_release(ap, "check this release", dest="sglang")
    add_options(ap, CompatOptions, only=("download",))
    add_options(ap.add_mutually_exclusive_group(), CompatOptions, only=("source", "wheel"))
    add_options(ap, CompatOptions, only=("wheel_dir",))
    cli_common.add_json_out(ap, "the report")
    return cli_common.finish(ap, "compat")


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    o = options_from(a, CompatOptions)

    def call():
        _check_local_inputs(a.sglang, o, a.json)  # before any download: a typo must not cost a network wait
        root, version = release_root(
            source=o.source, wheel=o.wheel, version=a.sglang, download=o.download, wheel_dirs=o.wheel_dir
        )
        return check_source(root, version)

    return run_command(
        "compat",
        call,
        format_report,
        json=a.json,
        as_json=lambda rep: rep.as_dict(),
        errors=(ReleaseUnavailable,),
        verdict=lambda rep: 0 if rep.supported else 1,
    )


def _check_local_inputs(release: str | None, o: CompatOptions, json: str | None) -> None:

    if release is not None and (not parse(release) or "/" in release or release != release.strip()):
        raise ReleaseUnavailable(f"--sglang {release!r}: not a release number (e.g. 0.5.16)")
    for d in o.wheel_dir:
        if not Path(d).is_dir():
            raise ReleaseUnavailable(f"--wheel-dir {d}: no such folder")
    if o.source is not None and not Path(o.source).is_dir():
        raise ReleaseUnavailable(f"--source {o.source}: no such folder")
    if o.wheel is not None:
        try:
            regular_file(o.wheel, "wheel")
        except BadInput as e:
            raise ReleaseUnavailable(f"--wheel {e}") from None
    if json not in (None, "-") and not Path(json).resolve().parent.is_dir():
        raise ReleaseUnavailable(f"--json {json}: its folder does not exist")


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("compat", main))
