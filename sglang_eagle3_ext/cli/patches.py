"""`sglang-eagle3 patches [--list | --print RELEASE | --path RELEASE]`: the static patches for baked SGLang images.

The diffs (`patches/RELEASE/sglang-eagle3-ext.patch`, how to apply them: patches/README.md) ship inside the
package, so wheel users get them too:

    sglang-eagle3 patches --print 0.5.16 > sge3.patch
    cd "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" && patch -p1 --forward --fuzz=0 < sge3.patch
"""

from __future__ import annotations

import sys

from ..compat.options import PatchesOptions
from ..compat.static_patches import find, releases, sort_key
from ..options.parser import add_options, options_from
from . import args as cli_args
from . import common as cli_common


def main(argv=None) -> int:
    ap = cli_args.parser("patches", __doc__)
    add_options(ap.add_mutually_exclusive_group(), PatchesOptions)
    o = options_from(cli_args.finish(ap, "patches").parse_args(argv), PatchesOptions)
    if o.print_release:
        sys.stdout.write(find(o.print_release).read_text())
    elif o.path:
        print(find(o.path, "--path"))
    else:
        for rel, f in sorted(releases().items(), key=lambda kv: sort_key(kv[0])):
            print(f"{rel:10} {f}")
    return cli_common.EXIT_OK


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("patches", main))
