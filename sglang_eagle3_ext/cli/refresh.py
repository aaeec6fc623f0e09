"""`sglang-eagle3 refresh --dump-dir DIR --draft DRAFT --out OUT [--swap URL]`: a better draft from the traffic
it serves.

Reads the samples a dump while serving wrote since the last refresh (the cursor `refresh_cursor.json` in the dump
dir; with --max-accept-len only requests the draft served with a lower accept length), holds a share out,
continues training from DRAFT's weights on the rest (the recipe of `train --init-from`), converts and checks the
result, and predicts both drafts' accept length on the held-out samples (`eval`'s simulation). The new draft is
accepted when it gains at least --margin; with --swap it then replaces the served draft in the running server
(`swap`). The cursor records the samples as used by the new draft only once it is served (accepted; with --swap,
reported served by the server); held-out samples are recorded as held out, never trained. A refresh stopped
half-way is settled by the next one. Otherwise the current draft stays and the reason is printed.

OUT (a new folder) receives data/, train/, draft/ (the new draft, in SGLang's layout) and refresh.json.
Exit 0 accepted (and swapped with --swap); 1 not accepted (the reason printed); 2 bad input or a refused swap.
"""

from __future__ import annotations

import sys

from ..boundary import Refused
from ..json_file import write_json
from ..options.parser import options_from
from ..refresh.run import RefreshOptions, refresh, render
from ..training.report import TrainDraftError
from . import args as cli_args
from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from .run import options_parser, progress_lines, run_command


def build_parser():

    return cli_args.finish(options_parser("refresh", __doc__, RefreshOptions, paragraphs=3), "refresh")


_STOPPED = (
    "a refresh stopped half-way records none of its samples as used (the next refresh settles it): run refresh again"
)


def main(argv: list[str] | None = None) -> int:

    a = build_parser().parse_args(argv)
    opts = options_from(
        a,
        RefreshOptions,
        say=progress_lines("refresh", a),
        report=(lambda rep: write_json(a.json, rep)) if a.json else None,  # before the cursor records samples
    )

    def call() -> dict:
        if a.draft is None and a.swap_url is None:
            raise Refused("--draft is required without --swap (with --swap it defaults to the served draft)")
        return refresh(opts)

    def verdict(rep: dict) -> int:
        if rep.get("swap") and not rep["swap"].get("ok"):
            return EXIT_BAD_INPUT
        return EXIT_OK if rep["accepted"] else EXIT_FAILED

    return run_command(
        "refresh",
        call,
        render,
        json=a.json,
        as_json=None,  # refresh writes it itself (RefreshOptions.report)
        stopped=_STOPPED,
        verbose=a.verbose,
        bars=True,
        errors=(TrainDraftError,),
        verdict=verdict,
    )


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("refresh", main))
