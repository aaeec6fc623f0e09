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

from ..boundary import BadInput
from ..dump import driver, exporters
from ..dump.client_files import ClientError
from ..dump.export import ExportError
from ..dump.run_options import DUMP_DIR, PROMPTS
from ..options.parser import add_options, options_from
from ..options.values import folder_out
from . import common as cli_common
from .interrupts import interrupted_exits
from .output import library_output

_DUMP_DIR = DUMP_DIR
_PROMPTS = PROMPTS


def _run(args) -> int:
    opts = options_from(args, driver.RunOptions, progress=not args.quiet)
    with interrupted_exits("dump run", "the samples written so far stay in the manifest; run the same command again"):
        res = driver.run(opts, cli_common.load_tokenizer)
    _report(args, res.summary, _run_text(res.summary))
    driver.warn_unfinished(opts, res)
    if res.fatal is not None:
        raise res.fatal
    return 0 if res.ok else 1


def _export(args) -> int:

    with library_output(getattr(args, "verbose", False), bars=True):  # our bar, not the datasets' save bar
        n = driver.export(
            args.dump_dir, args.to, args.out, data=args.data, workers=args.workers, progress=not args.quiet
        )
    _report(
        args,
        {"exported": n, "to": args.to, "out": str(args.out)},
        f"exported {n} samples for {args.to} into {args.out}",
    )
    return 0


def _status(args) -> int:
    out = driver.status(args.dump_dir)
    _report(args, out, _status_text(out))
    return 0


def _report(args, obj: dict, text: str) -> None:
    """Text by default; --json [PATH] writes the same as JSON (only JSON on stdout with no PATH)."""
    if args.json:
        cli_common.write_json(args.json, obj)
    if args.json != "-":
        print(text)


def _counters(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _status_text(st: dict) -> str:
    skips = {k: v for k, v in st.items() if k.startswith("skipped")}
    lines = [
        f"dump {st['dump_dir']}: {st['complete_samples']} complete samples, {st['tokens']} tokens, "
        f"{st['bytes'] / 1e9:.3f} GB"
    ] + ([f"  not dumped: {_counters(skips)}"] if skips else [])
    for name, w in st["writers"].items():
        err = f" ({w['error']})" if w.get("error") else ""
        stats = w.get("stats") if isinstance(w.get("stats"), dict) else {}
        lines.append(f"  writer {name}: {w.get('state', '?')}{err}" + (f" ({_counters(stats)})" if stats else ""))
    return "\n".join(lines)


def _run_text(sm: dict) -> str:
    return (
        f"dump run: {sm['written']} of {sm['sent']} sent samples written ({sm['already_done']} of "
        f"{sm['samples']} already in the manifest), {sm['tokens_written']} tokens, {sm['gb_written']} GB in "
        f"{sm['seconds']} s; failed requests {sm['failed_requests']}, not written {sm['not_written']}, "
        f"malformed lines {sm['malformed_lines']}, duplicate ids {sm['duplicate_ids']}"
        + "".join(f", {k} {v}" for k, v in sm.items() if k.startswith("skipped"))
    )


def _add_run(sub) -> None:
    c = cli_common
    r = sub.add_parser("run", help="send a JSONL dataset to a dumping server")
    add_options(r, driver.RunOptions)
    c.add_json_out(r, "the summary")
    c.add_verbosity(r, quiet="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    c = cli_common
    p = c.parser("dump", __doc__)
    sub = p.add_subparsers(dest="cmd", metavar="{run,export,status}")
    _add_run(sub)
    e = sub.add_parser("export", help=f"convert a dump for a training tool: {', '.join(exporters.names())}")
    e.add_argument(
        "--dump-dir", required=True, type=_DUMP_DIR, help="the dump directory (the server's SGLANG_EAGLE3_EXT_DUMP_DIR)"
    )
    e.add_argument("--to", choices=exporters.names(), required=True, help="output format")
    e.add_argument(
        "--out", required=True, type=folder_out("give a new or empty folder for the export"), help="output directory"
    )
    e.add_argument("--data", type=_PROMPTS, help="the JSONL used for the dump: sample order and loss_mask fields")
    e.add_argument(
        "--workers",
        type=c.positive_int,
        default=8,
        help="samples converted in parallel (threads: file io and tensor copies release the GIL)",
    )
    c.add_json_out(e, "what was exported")
    c.add_verbosity(e, quiet="no progress bar")
    s = sub.add_parser("status", help="manifest and writer status")
    s.add_argument("--dump-dir", required=True, type=_DUMP_DIR, help="the dump directory")
    c.add_json_out(s, "the manifest totals and every writer's status")
    return c.finish(p, "dump")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not getattr(args, "verbose", False):
        logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries: the final error says it once
    try:
        return {"run": _run, "export": _export, "status": _status}[args.cmd](args)
    except (ClientError, cli_common.CliError, BadInput, ExportError) as e:  # each names the input and the fix
        print(cli_common.error_line(f"dump {args.cmd}", str(e)), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("dump", main))
