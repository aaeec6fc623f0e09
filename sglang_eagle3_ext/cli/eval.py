"""`sglang-eagle3 eval --draft DIR --data DIR [--steps 3] [--url URL]`: a draft's served accept length, predicted
offline.

Runs the draft on held-out samples of a dump (or a training export) exactly as SGLang's EAGLE-3 worker runs it
with --speculative-eagle-topk 1 -- the first draft step on the target's captured states, later steps on the
draft's own states and tokens, d2t applied, greedy acceptance against the target's recorded tokens (a DFlash
draft as the DFLASH worker runs it: one block of --steps drafts per round from the bonus token) -- and reports
P(draft token k accepted | tokens < k accepted), the accept length as SGLang reports it, and, with --url, the
figure a running server gives on the same prompts. The accept length is SGLang's own figure
(avg_spec_accept_length: accepted drafts + 1 per verify round); the per-request one (meta_info
spec_accept_length: tokens / rounds, cut at max_new_tokens) stands beside it. The held-out split is the one
`train` holds out of the same files. Local inputs are checked before any server is asked. Exit 0; 2 on bad
input (one line naming the input and the fix), a server setting eval does not simulate, or a served figure no
server with these settings can report (the report still lists it).
"""

from __future__ import annotations

import argparse
import sys

from ..acceptance.evaluate import evaluate, render
from ..acceptance.options import EvalOptions
from ..boundary import Refused
from ..options.parser import options_from
from . import args as cli_args
from .run import json_in_existing_folder, options_parser, progress_lines, run_command


def build_parser() -> argparse.ArgumentParser:

    return options_parser("eval", __doc__, EvalOptions, paragraphs=2)


def main(argv: list[str] | None = None) -> int:

    a = cli_args.finish(build_parser(), "eval").parse_args(argv)
    opts = options_from(a, EvalOptions, say=progress_lines("eval", a))

    def implausible(rep: dict) -> None:
        """A reply taken on trust would make the comparison meaningless: the report says which figure."""
        odd = (rep.get("served") or {}).get("implausible")
        if odd:
            more = f" (+{len(odd) - 1} more)" if len(odd) > 1 else ""
            raise Refused(
                f"--url {a.url}: a served figure no server at --steps {a.steps} can report: {odd[0]}{more}; "
                "see served.implausible"
            )

    return run_command(
        "eval",
        lambda: evaluate(opts),
        render,
        json=a.json,
        json_check=json_in_existing_folder,
        stopped="no report was written; run the same command again",
        verbose=a.verbose,
        verdict=implausible,
    )


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("eval", main))
