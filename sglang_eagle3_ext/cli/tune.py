"""`sglang-eagle3 tune --target DIR --draft DIR --data DUMP --concurrency 1,4,16,32 [--budget-min N]`: the fastest
speculative settings for your own draft and traffic.

The accept length of every --speculative-num-steps 1..8 comes offline from one simulation of your dump (eval's,
topk 1); one short timing pass per attention backend the release and GPU offer (target-only and EAGLE-3 servers,
CUDA graphs on) gives each batch size's verify, draft step and draft extend; a cost model predicts tokens/s for
every (backend, steps, concurrency) and reports its error; only the best candidates per concurrency band are
started and timed with `bench` on your prompts (greedy outputs compared with the target alone). Written to
--out: a preset per band and, where the release has --speculative-adaptive, one preset with a fitted
--speculative-adaptive-config; timings.json; tune.json; a plot. Exit 0; 2 on bad input (one line naming it),
a backend the release lacks, a server command SGLang's own parser refuses (--server-args), or a budget below one
timing pass (GPU minutes count every GPU of a --tp-size server).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from ..boundary import writable_dir
from ..json_file import check_json_dest
from ..options.parser import options_from
from ..server.tokenizer import load_tokenizer
from ..tune.options import TuneOptions
from . import args as cli_args
from .run import options_parser, progress_lines, run_command


def build_parser() -> argparse.ArgumentParser:

    return options_parser("tune", __doc__, TuneOptions, paragraphs=2)


def main(argv: list[str] | None = None) -> int:
    from ..tune.run import render, tune

    raw = list(sys.argv[1:] if argv is None else argv)
    p = build_parser()
    p._option_string_actions["--json"].type = None  # checked below once --out is known: a report may go inside it
    a = cli_args.finish(p, "tune").parse_args(argv)
    tok = (lambda: load_tokenizer(a.target, a.trust_remote_code)) if a.prompts else None
    opts = options_from(
        a,
        TuneOptions,
        tokenizer=tok,
        say=progress_lines("tune", a),
        command="sglang-eagle3 tune " + " ".join(shlex.quote(x) for x in raw),
    )

    def call() -> dict:
        in_out = _json_in_out(a.json, a.out)
        rep = tune(opts)
        if in_out:  # a dry run makes no --out of its own
            writable_dir(a.out, "--out", make=True)
        return rep

    stopped = "the servers it started are stopped; run the same command again"
    return run_command("tune", call, render, json=a.json, json_check=None, stopped=stopped, verbose=a.verbose)


def _json_in_out(dest: str | None, out: str) -> bool:
    """--json checked before anything starts; whether it names a file right inside --out, which tune makes: then
    --out must be a folder this user can make or write into."""
    if dest and dest != "-":
        p = os.path.abspath(os.path.expanduser(dest))
        if os.path.dirname(p) == os.path.abspath(os.path.expanduser(out)) and not os.path.isdir(p):
            writable_dir(out, "--out")
            return True
    check_json_dest(dest)
    return False


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("tune", main))
