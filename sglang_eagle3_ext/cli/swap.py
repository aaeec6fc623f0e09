"""`sglang-eagle3 swap --url URL --draft DIR`: a new EAGLE-3 draft into a running server, without a restart.

The draft is checked here first with the rules the server applies (those of start-up: layout, every tensor's
shape and value, d2t, the target; and those of a swap: built as the served draft, fed the HF indices the target
captures now), then sent through SGLang's /update_weights_from_disk route: the server lets the requests in flight
finish, holds new ones back, checks the draft again on every TP rank and loads it into the served draft's
parameters in place. On any refusal the old draft keeps serving. The pause printed is the request's wall time.
A draft that SGLang would build otherwise (any config key its draft class reads: the rotary's, the norms') is
refused: restart to serve it. Local inputs (--json's folder, --draft-link, the draft's files) are checked before
the server is contacted; when --timeout passes first, the server's own state says what happened.

After a swap the server reports the new draft (/get_server_info's speculative_draft_model_path); a restart serves
what its launch command names: swap prints that argument, and --draft-link points a symlink the launch command
names at the new draft (atomically, only once the server serves it).

The server must run with this package active (SGLANG_EAGLE3_EXT=1 or `sglang-eagle3 launch`) on SGLang 0.5.14+.
Exit 0 swapped; 2 refused (the reason in one line: a bad draft, or a server that cannot take it), bad input, or
not confirmed (no reply within --timeout and no outcome shown within --settle).
"""

from __future__ import annotations

import sys

from ..draft.swap.client import SwapOptions, render, swap
from ..json_file import write_json
from ..options.parser import options_from
from . import args as cli_args
from .run import one_line, options_parser, progress_lines, run_command


def build_parser():

    return cli_args.finish(options_parser("swap", __doc__, SwapOptions, paragraphs=4), "swap")


def main(argv: list[str] | None = None) -> int:

    a = build_parser().parse_args(argv)
    opts = options_from(a, SwapOptions, say=progress_lines("swap", a))

    def refused(e: BaseException) -> str:  # names the draft or the server and the problem; --json says it too
        if a.json:
            fallback = {"url": a.url, "draft": a.draft, "ok": False, "error": str(e)}
            write_json(a.json, getattr(e, "report", None) or fallback)
        return one_line(e)

    return run_command("swap", lambda: swap(opts), render, json=a.json, verbose=a.verbose, refused=refused)


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("swap", main))
