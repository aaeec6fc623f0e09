"""`python -m sglang_eagle3_ext.dump`: drive a dumping SGLang server, and export its dump.

  run     send every JSONL sample as one prefill (rid = sanitised sample id), resume from the manifest,
          progress (samples/s, tokens/s, GB written), summary. With --generate the target first writes
          a response (rid prefix "nodump-": that prefill is not dumped), then prompt+response is dumped.
  export  --to FORMAT: the dump in a training tool's layout (`export --help` lists the formats)
  status  what the manifest and the writers' status files say

Input lines: {"id": ..., "input_ids": [...]} | {"id": ..., "text": "..."} | {"id": ..., "messages": [...]}
(optional "loss_mask": 0/1 per token, used by export --data). A malformed line is skipped, named with its
file:line (exit 1). Text and messages need the target's tokenizer: --target DIR (with --trust-remote-code only
for a tokenizer that ships code you trust); a tokenizer is never loaded from a path the server names. The dump
dir must be visible to this client (shared filesystem): resume and completion are read from its manifests.
`status` also sums the writers' skip counters (e.g. skipped_multimodal: image requests, not dumped).
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..dump import driver, exporters
from ..dump.client_files import ClientError
from ..dump.export import ExportError
from ..dump.run_options import ExportOptions, RunOptions, StatusOptions
from ..options.parser import add_options, options_from
from ..server.tokenizer import load_tokenizer
from . import args as cli_args
from . import common as cli_common
from .run import run_command

_ERRORS = (ClientError, ExportError)  # each names the input and the fix


def _run(args) -> int:
    opts = options_from(args, RunOptions, progress=not args.quiet)

    def verdict(res) -> int:
        driver.warn_unfinished(opts, res)
        if res.fatal is not None:
            raise res.fatal
        return 0 if res.ok else 1

    return run_command(
        "dump run",
        lambda: driver.run(opts, load_tokenizer),
        lambda res: driver.render_run(res.summary),
        json=args.json,
        as_json=lambda res: res.summary,
        stopped="the samples written so far stay in the manifest; run the same command again",
        errors=_ERRORS,
        verdict=verdict,
    )


def _export(args) -> int:
    o = options_from(args, ExportOptions, progress=not args.quiet)
    return run_command(
        "dump export",
        lambda: driver.export_report(
            driver.export(o.dump_dir, o.to, o.out, data=o.data, workers=o.workers, progress=o.progress), o.to, o.out
        ),
        driver.render_export,
        json=args.json,
        verbose=args.verbose,
        bars=True,  # our bar, not the datasets' save bar
        errors=_ERRORS,
    )


def _status(args) -> int:
    o = options_from(args, StatusOptions)
    return run_command(
        "dump status", lambda: driver.status(o.dump_dir), driver.render_status, json=args.json, errors=_ERRORS
    )


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.parser("dump", __doc__)
    sub = p.add_subparsers(dest="cmd", metavar="{run,export,status}")
    r = sub.add_parser("run", help="send a JSONL dataset to a dumping server")
    add_options(r, RunOptions)
    cli_args.add_json_out(r, "the summary")
    cli_args.add_verbosity(r, quiet="no progress bar")
    e = sub.add_parser("export", help=f"convert a dump for a training tool: {', '.join(exporters.names())}")
    add_options(e, ExportOptions)
    cli_args.add_json_out(e, "what was exported")
    cli_args.add_verbosity(e, quiet="no progress bar")
    s = sub.add_parser("status", help="manifest and writer status")
    add_options(s, StatusOptions)
    cli_args.add_json_out(s, "the manifest totals and every writer's status")
    return cli_args.finish(p, "dump")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not getattr(args, "verbose", False):
        logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries: the final error says it once
    return {"run": _run, "export": _export, "status": _status}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("dump", main))
