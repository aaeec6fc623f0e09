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
from ..boundary import BadInput, Refused
from ..options.parser import add_options, options_from
from . import common as cli_common
from .common import CliError
from .interrupts import interrupted_exits
from .output import library_output


def build_parser() -> argparse.ArgumentParser:

    p = cli_common.parser("eval", cli_common.doc_description(__doc__, paragraphs=2))
    add_options(p, EvalOptions)
    cli_common.add_json_out(p, "the report")
    cli_common.add_verbosity(p, quiet="no progress lines")
    return p


def _check_json(dest: str | None) -> None:
    from pathlib import Path

    if not dest or dest == "-":
        return
    p = Path(dest)
    if p.is_dir():
        raise CliError(f"--json {dest}: is a folder; give a file path")
    if not p.parent.is_dir():
        raise CliError(f"--json {dest}: no folder {p.parent}; create it or give another path")


def main(argv: list[str] | None = None) -> int:

    a = cli_common.finish(build_parser(), "eval").parse_args(argv)
    say = None if a.quiet or a.json == "-" else (lambda m: print(f"eval: {m}", file=sys.stderr, flush=True))
    opts = options_from(a, EvalOptions, say=say)
    try:
        _check_json(a.json)
        with interrupted_exits("eval", "no report was written; run the same command again"), library_output(a.verbose):
            rep = evaluate(opts)
    except (Refused, BadInput) as e:  # names the input and the fix
        print(cli_common.error_line("eval", str(e).replace("\n", " ")), file=sys.stderr)
        return getattr(e, "code", cli_common.EXIT_BAD_INPUT)
    code = cli_common.report(a.json, rep, render(rep))
    odd = (rep.get("served") or {}).get("implausible")
    if odd:  # a reply taken on trust would make the comparison meaningless: the report says which figure
        print(
            cli_common.error_line(
                "eval",
                f"--url {a.url}: a served figure no server at --steps {a.steps} can "
                f"report: {odd[0]}" + (f" (+{len(odd) - 1} more)" if len(odd) > 1 else "") + "; see served.implausible",
            ),
            file=sys.stderr,
        )
        return cli_common.EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("eval", main))
