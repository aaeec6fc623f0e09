"""Pre-upgrade check: which of our patches a SGLang release can take, without importing SGLang.

    python -m sglang_eagle3_ext.compat                      # the installed release
    python -m sglang_eagle3_ext.compat --sglang 0.5.24 --download   # a named release (wheel, no deps)
    python -m sglang_eagle3_ext.compat --source DIR [--sglang X]    # an unpacked tree (DIR/sglang or DIR)

How each target is found: compat/release.py. Exit status: 0 supported, 1 unsupported, 2 the release could
not be obtained.
"""

from __future__ import annotations

import sys

from ..compat.options import CompatOptions
from ..compat.release import ReleaseUnavailable, check_source, format_report, release_root
from ..options.parser import add_options, options_from
from ..options.values import add_sglang_release
from . import args as cli_args
from . import common as cli_common
from .run import run_command


def build_parser():
    ap = cli_args.parser("compat", cli_args.doc_description(__doc__))
    add_sglang_release(ap, "check this release", dest="sglang")
    add_options(ap, CompatOptions, only=("download",))
    add_options(ap.add_mutually_exclusive_group(), CompatOptions, only=("source", "wheel"))
    add_options(ap, CompatOptions, only=("wheel_dir",))
    cli_args.add_json_out(ap, "the report")
    return cli_args.finish(ap, "compat")


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    o = options_from(a, CompatOptions)

    def call():
        o.check_local(a.sglang, a.json)
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


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("compat", main))
