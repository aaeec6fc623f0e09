"""`python -m sglang_eagle3_ext.dump`: drive a dumping SGLang server, and export its dump.

  run     send every JSONL sample as one prefill (rid = sanitised sample id), resume from the manifest,
          progress (samples/s, tokens/s, GB written), summary. With --generate the target first writes
          a response (rid prefix "nodump-": that prefill is not dumped), then prompt+response is dumped.
  export  --to speculators | specforge
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
import json
import logging
import sys
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from ..boundary import BadInput
from .client_files import (ClientError, ManifestTail, generated_loss_masks, read_samples,  # noqa: F401 - API
                           require_server_dumping_to, skip_counters, writer_status)
from .config import GENERATED_FILE, NODUMP_RID_PREFIX

log = logging.getLogger("sglang_eagle3_ext.dump.client")


class Tokenizer:
    """The tokenizer of the model the user named with --target (never one a server's reply names)."""

    def __init__(self, name, trust_remote_code: bool = False):
        from ..cli.common import load_tokenizer

        self.tok = load_tokenizer(name, trust_remote_code)

    def ids(self, sample: dict, generation_prompt: bool) -> list[int]:
        if sample["kind"] == "text":
            return list(self.tok(sample["value"], add_special_tokens=True)["input_ids"])
        out = self.tok.apply_chat_template(sample["value"], tokenize=True, add_generation_prompt=generation_prompt)
        if isinstance(out, dict) or hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)


def _generate(srv, ids, rid, max_new_tokens, temperature=0.0, timeout=600.0):
    return srv.post("/generate", {"input_ids": ids, "rid": rid,
                                  "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature}},
                    timeout=timeout)


def _inputs(args):
    """Everything local, checked before the server is asked anything: (samples, malformed, duplicates, the
    dump's meta, the tokenizer or None)."""
    samples, bad, dups = read_samples(args.data, args.limit)
    if not samples:
        raise ClientError(f"--data {args.data}: no sample to send ({bad} malformed lines, each named above)")
    meta = require_server_dumping_to(args.dump_dir)
    tail = ManifestTail(args.dump_dir)
    tail.poll()
    tok = None
    if any(s["kind"] != "input_ids" and s["id"] not in tail.ids for s in samples):
        if not args.tokenizer:
            raise ClientError("text/messages lines need the target's tokenizer: pass --target DIR (the model the "
                              "server serves; a tokenizer is never loaded from a path the server names), plus "
                              "--trust-remote-code if its tokenizer ships code you trust; or send input_ids")
        tok = Tokenizer(args.tokenizer, args.trust_remote_code)
    return samples, bad, dups, meta, tail, tok


class _Sender:
    """Sends the samples, `concurrency` in flight, and follows the manifest: progress bar, what failed, and
    the first refusal that makes every later sample fail alike (a malformed reply, a missing tokenizer)."""

    def __init__(self, args, srv, tok, tail: ManifestTail, samples: list[dict], done: int):
        self.args, self.srv, self.tok, self.tail, self.samples = args, srv, tok, tail, samples
        self.failed: dict[str, str] = {}
        self.fatal: Exception | None = None
        self.sent: set[str] = set()
        self.stop = threading.Event()
        self.gen_lock = threading.Lock()
        self.gen_log = open(Path(args.dump_dir) / GENERATED_FILE, "a") if args.generate else None
        self.t0, self.base = time.monotonic(), (len(tail.ids), tail.tokens, tail.bytes)
        self.bar = None
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=len(samples), initial=done, unit="sample", disable=args.quiet)
        except ImportError:
            pass

    def one(self, s) -> None:
        from ..server.replies import generate_reply

        if self.stop.is_set():
            return
        a, tok = self.args, self.tok
        ids = s["value"] if s["kind"] == "input_ids" else tok.ids(s, generation_prompt=a.generate)
        if a.generate:
            where = self.srv.where("POST", "/generate")
            out = generate_reply(_generate(self.srv, ids, f"{NODUMP_RID_PREFIX}{s['id']}-{uuid.uuid4().hex[:8]}",
                                           a.max_new_tokens, a.temperature, a.timeout), where)
            gen = out["output_ids"]
            if gen is None:
                if tok is None:
                    raise ClientError(f"{where}: the reply has no output_ids, only text; pass --target DIR")
                gen = tok.tok(out["text"], add_special_tokens=False)["input_ids"]
            prompt_len, ids = len(ids), list(ids) + list(gen)
            with self.gen_lock:  # before the dump request: a listed sample always has its mask
                self.gen_log.write(json.dumps({"id": s["id"], "prompt_len": prompt_len, "len": len(ids)}) + "\n")
                self.gen_log.flush()
        _generate(self.srv, list(ids), s["id"], 1, 0.0, a.timeout)

    def refresh(self) -> None:
        tail, bar = self.tail, self.bar
        tail.poll()
        if bar is not None:
            n0, tok0, b0 = self.base
            bar.n = len(tail.ids & {s["id"] for s in self.samples}) if len(self.samples) < 200_000 else len(tail.ids)
            dt = max(time.monotonic() - self.t0, 1e-6)
            bar.set_postfix_str(f"{(len(tail.ids) - n0) / dt:.1f} samples/s {(tail.tokens - tok0) / dt:,.0f} "
                                f"tok/s {(tail.bytes - b0) / 1e9:.2f} GB")
            bar.refresh()

    def send(self, todo: list[dict]) -> None:
        c = self.args.concurrency
        with ThreadPoolExecutor(c) as pool:
            pending, it = {}, iter(todo)
            while True:
                while len(pending) < c * 2 and not self.stop.is_set():
                    s = next(it, None)
                    if s is None:
                        break
                    pending[pool.submit(self.one, s)] = s
                    self.sent.add(s["id"])
                if not pending:
                    break
                done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for f in done:
                    self.settle(pending.pop(f), f.exception())
                self.refresh()

    def settle(self, s: dict, e: BaseException | None) -> None:
        if e is None:
            return
        self.failed[s["id"]] = f"{type(e).__name__}: {e}"
        log.warning("sample %s failed: %s", s["id"], self.failed[s["id"]])
        if isinstance(e, (ClientError, BadInput)) and self.fatal is None:   # the next would fail alike
            self.fatal = e
            self.stop.set()

    def await_writes(self) -> None:
        """Writes are asynchronous: wait (--wait-s) for the manifest to list what was sent."""
        deadline = time.monotonic() + self.args.wait_s
        left = len(self.sent - set(self.failed) - self.tail.ids)
        if left and self.args.wait_s > 0:
            log.info("waiting up to %g s for the writers to list %d more samples (--wait-s)", self.args.wait_s, left)
        while time.monotonic() < deadline and not (self.sent - set(self.failed)) <= self.tail.ids:
            time.sleep(0.5)
            self.refresh()
            try:
                require_server_dumping_to(self.args.dump_dir)
            except ClientError as e:
                self.failed["<writer>"] = str(e)
                break

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.gen_log is not None:
            self.gen_log.close()


def run(args) -> int:
    samples, bad, dups, meta, tail, tok = _inputs(args)
    from ..server.http_client import Server
    from ..server.replies import server_args

    srv = Server(args.url, timeout=args.timeout)
    info = srv.server_info()
    if info is None:
        raise ClientError(f"server {srv.url} answers neither /get_server_info nor /server_info: is it SGLang?")
    server_args(info, srv.where("GET", "/get_server_info"))   # a server that answers sanely
    todo = [s for s in samples if s["id"] not in tail.ids]
    log.info("dump run: %d samples (%d already in the manifest, %d malformed lines, %d duplicate ids skipped); "
             "layers %s", len(samples), len(samples) - len(todo), bad, dups, meta.get("layer_indices_hf"))
    job = _Sender(args, srv, tok, tail, samples, len(samples) - len(todo))
    try:
        job.send(todo)
        job.await_writes()
    finally:
        job.close()
    sent, failed = job.sent, job.failed
    missing = sorted(sent - tail.ids - set(failed))
    n0, tok0, b0 = job.base
    summary = {"samples": len(samples), "already_done": len(samples) - len(todo), "sent": len(sent),
               "written": len(sent & tail.ids), "failed_requests": len(failed), "not_written": len(missing),
               "malformed_lines": bad, "duplicate_ids": dups, "seconds": round(time.monotonic() - job.t0, 1),
               "tokens_written": tail.tokens - tok0, "gb_written": round((tail.bytes - b0) / 1e9, 3),
               "dump_dir": str(args.dump_dir), **skip_counters(writer_status(Path(args.dump_dir)))}
    _report(args, summary, _run_text(summary))
    if missing:
        log.warning("%d sent samples are not in the manifest (refused: prefix cache / NaN / writer stopped; see "
                    "the server log and %s/status/); e.g. %s", len(missing), args.dump_dir, missing[:5])
    if bad:
        log.warning("%d malformed lines of %s were not sent (each named above)", bad, args.data)
    if job.fatal is not None:
        raise job.fatal
    return 0 if not failed and not missing and not bad else 1


def _loss_masks_and_order(data):
    """(sample order, {id: loss_mask}) from the dataset of the dump; a malformed line is an error here (it
    would silently lose its sample's mask or order)."""
    if not data:
        return None, None
    samples, _, _ = read_samples(data, strict=True)
    return [s["id"] for s in samples], {s["id"]: s["loss_mask"] for s in samples if s.get("loss_mask")}


def export(args) -> int:
    from .export import export_specforge, export_speculators, require_dump_dir

    require_dump_dir(args.dump_dir)     # a mistyped path is an error, not an empty export
    order, masks = _loss_masks_and_order(args.data)
    gen = generated_loss_masks(args.dump_dir)
    if gen:
        log.info("loss masks: %d generated samples train on the response only (%s); --data masks take precedence",
                 len(gen), GENERATED_FILE)
        masks = {**gen, **(masks or {})}
    fn = export_speculators if args.to == "speculators" else export_specforge
    n = fn(args.dump_dir, args.out, order=order, loss_masks=masks, workers=args.workers,
           progress=not args.quiet)
    _report(args, {"exported": n, "to": args.to, "out": str(args.out)},
            f"exported {n} samples for {args.to} into {args.out}")
    return 0


def status(args) -> int:
    from .export import require_dump_dir
    from .manifest import read_manifest

    d = require_dump_dir(args.dump_dir)  # a mistyped path is an error, not "0 samples"
    man = read_manifest(d)
    st = writer_status(d)
    out = {"dump_dir": str(d), "complete_samples": len(man),
           "tokens": sum(r.get("num_tokens", 0) for r in man.values()),
           "bytes": sum(r.get("bytes", 0) for r in man.values()), **skip_counters(st), "writers": st}
    _report(args, out, _status_text(out))
    return 0


def _report(args, obj: dict, text: str) -> None:
    """Text by default; --json [PATH] writes the same as JSON (only JSON on stdout with no PATH)."""
    from ..cli.common import write_json

    if args.json:
        write_json(args.json, obj)
    if args.json != "-":
        print(text)


def _counters(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _status_text(st: dict) -> str:
    skips = {k: v for k, v in st.items() if k.startswith("skipped")}
    lines = [f"dump {st['dump_dir']}: {st['complete_samples']} complete samples, {st['tokens']} tokens, "
             f"{st['bytes'] / 1e9:.3f} GB"] + ([f"  not dumped: {_counters(skips)}"] if skips else [])
    for name, w in st["writers"].items():
        err = f" ({w['error']})" if w.get("error") else ""
        stats = w.get("stats") if isinstance(w.get("stats"), dict) else {}
        lines.append(f"  writer {name}: {w.get('state', '?')}{err}" + (f" ({_counters(stats)})" if stats else ""))
    return "\n".join(lines)


def _run_text(sm: dict) -> str:
    return (f"dump run: {sm['written']} of {sm['sent']} sent samples written ({sm['already_done']} of "
            f"{sm['samples']} already in the manifest), {sm['tokens_written']} tokens, {sm['gb_written']} GB in "
            f"{sm['seconds']} s; failed requests {sm['failed_requests']}, not written {sm['not_written']}, "
            f"malformed lines {sm['malformed_lines']}, duplicate ids {sm['duplicate_ids']}"
            + "".join(f", {k} {v}" for k, v in sm.items() if k.startswith("skipped")))


def build_parser() -> argparse.ArgumentParser:
    from ..cli import common as cli_common

    p = cli_common.parser("dump", __doc__)
    sub = p.add_subparsers(dest="cmd", metavar="{run,export,status}")
    r = sub.add_parser("run", help="send a JSONL dataset to a dumping server")

    r.add_argument("--url", default="http://127.0.0.1:30000", help="the dumping SGLang server")
    r.add_argument("--data", required=True, metavar="PATH", help="JSONL dataset (input lines: see above)")
    r.add_argument("--dump-dir", required=True, help="the server's SGLANG_EAGLE3_EXT_DUMP_DIR, as seen from here")
    r.add_argument("--concurrency", type=cli_common.positive_int, default=8, help="requests in flight")
    r.add_argument("--target", dest="tokenizer", metavar="DIR",
                   help="target model dir or HF id whose tokenizer turns text/messages into token ids (needed for "
                        "them: a tokenizer is never loaded from a path the server names)")
    cli_common.hidden_alias(r, "--tokenizer", dest="tokenizer")
    r.add_argument("--trust-remote-code", action="store_true",
                   help="let --target's tokenizer run the code it ships (only for a model you trust)")
    r.add_argument("--generate", action="store_true", help="target writes a response first; dump prompt+response")
    r.add_argument("--max-new-tokens", type=cli_common.positive_int, default=512,
                   help="response length with --generate")
    r.add_argument("--temperature", type=cli_common.non_negative_float, default=0.0,
                   help="sampling temperature with --generate")
    r.add_argument("--limit", type=cli_common.positive_int, help="send only the first N samples")
    r.add_argument("--timeout", type=cli_common.positive_float, default=600.0, metavar="S",
                   help="seconds for one request, all of its reply included")
    r.add_argument("--wait-s", type=cli_common.non_negative_float, default=300.0,
                   help="how long to wait for the last writes")
    cli_common.add_json_out(r, "the summary")
    cli_common.add_verbosity(r, quiet="no progress bar")
    e = sub.add_parser("export", help="convert a dump for speculators or SpecForge")
    e.add_argument("--dump-dir", required=True, help="the dump directory (the server's SGLANG_EAGLE3_EXT_DUMP_DIR)")
    e.add_argument("--to", choices=("speculators", "specforge"), required=True, help="output format")
    e.add_argument("--out", required=True, help="output directory")
    e.add_argument("--data", help="the JSONL used for the dump: sample order and loss_mask fields")
    e.add_argument("--workers", type=cli_common.positive_int, default=8,
                   help="samples converted in parallel (threads: file io and tensor copies release the GIL)")
    cli_common.add_json_out(e, "what was exported")
    cli_common.add_verbosity(e, quiet="no progress bar")
    s = sub.add_parser("status", help="manifest and writer status")
    s.add_argument("--dump-dir", required=True, help="the dump directory")
    cli_common.add_json_out(s, "the manifest totals and every writer's status")
    return cli_common.finish(p, "dump")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not getattr(args, "verbose", False):
        logging.getLogger("urllib3").setLevel(logging.ERROR)   # its retries: the final error says it once
    from ..cli.common import CliError, error_line  # http_client.ServerError among them
    from .export import ExportError

    try:
        return {"run": run, "export": export, "status": status}[args.cmd](args)
    except (ClientError, CliError, BadInput, ExportError) as e:   # each names the input and the fix
        print(error_line(f"dump {args.cmd}", str(e)), file=sys.stderr)
        return 2
