"""`python -m sglang_eagle3_ext.dump`: drive a dumping SGLang server, and export its dump.

  run     send every JSONL sample as one prefill (rid = sanitised sample id), resume from the manifest,
          progress (samples/s, tokens/s, GB written), summary. With --generate the target first writes
          a response (rid prefix "nodump-": that prefill is not dumped), then prompt+response is dumped.
  export  --to speculators | specforge
  status  what the manifest and the writers' status files say

Input lines: {"id": ..., "input_ids": [...]} | {"id": ..., "text": "..."} | {"id": ..., "messages": [...]}
(optional "loss_mask" for input_ids lines, used by export --data). Text and messages need a tokenizer:
--target DIR (its tokenizer), or the server's own when it runs with a tokenizer. A --skip-tokenizer-init server only
accepts token ids. The dump dir must be visible to this client (shared filesystem): resume and
completion are read from its manifests.
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

from .config import ENV_DIR, ENV_DISCARD, GENERATED_FILE, META_FILE, NODUMP_RID_PREFIX
from .manifest import MANIFEST_DIR, sanitize_id

log = logging.getLogger("sglang_eagle3_ext.dump.client")


class ClientError(RuntimeError):
    pass


# ---- input ------------------------------------------------------------------------------------------
def read_samples(path, limit: int | None = None) -> tuple[list[dict], int]:
    """Parsed samples (id sanitised, duplicates dropped) and the number of skipped lines (logged)."""
    out, seen, bad = [], set(), 0
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                kinds = [k for k in ("input_ids", "text", "messages") if k in obj]
                if len(kinds) != 1:
                    raise ValueError("needs exactly one of input_ids / text / messages")
                kind = kinds[0]
                val = obj[kind]
                if kind == "input_ids" and not (isinstance(val, list) and val and all(isinstance(x, int) and x >= 0 for x in val)):
                    raise ValueError("input_ids must be a non-empty list of non-negative ints")
                if kind == "text" and not (isinstance(val, str) and val):
                    raise ValueError("text must be a non-empty string")
                if kind == "messages" and not (isinstance(val, list) and val and all(isinstance(m, dict) and "role" in m for m in val)):
                    raise ValueError("messages must be a list of {role, content}")
                raw_id = obj.get("id", f"line-{n}")
                sid = sanitize_id(str(raw_id))
            except (ValueError, TypeError) as e:
                bad += 1
                log.warning("%s:%d: skipped malformed line (%s)", path, n, e)
                continue
            if sid in seen:
                bad += 1
                log.warning("%s:%d: skipped duplicate id %r", path, n, raw_id)
                continue
            seen.add(sid)
            out.append({"id": sid, "kind": kind, "value": val, "loss_mask": obj.get("loss_mask")})
            if limit and len(out) >= limit:
                break
    return out, bad


# ---- server -----------------------------------------------------------------------------------------
def server_info(srv) -> dict:
    """srv: an http_client.Server (its failures are one-line ServerErrors, reported by main)."""
    info = srv.server_info()
    if info is None:
        raise ClientError(f"server {srv.url} answers neither /get_server_info nor /server_info")
    return info


class ManifestTail:
    """Incrementally reads manifests/*.jsonl: ids, tokens and bytes of complete samples."""

    def __init__(self, dump_dir):
        self.dir = Path(dump_dir) / MANIFEST_DIR
        self.offsets: dict[Path, int] = {}
        self.ids: set[str] = set()
        self.tokens = 0
        self.bytes = 0

    def poll(self) -> None:
        if not self.dir.is_dir():
            return
        for f in sorted(self.dir.glob("*.jsonl")):
            off = self.offsets.get(f, 0)
            with open(f, "rb") as fh:
                fh.seek(off)
                data = fh.read()
            end = data.rfind(b"\n") + 1          # only whole lines
            for line in data[:end].splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("id") in self.ids:
                    continue
                self.ids.add(rec["id"])
                self.tokens += int(rec.get("num_tokens", 0))
                self.bytes += int(rec.get("bytes", 0))
            self.offsets[f] = off + end


def writer_status(d: Path) -> dict:
    """name -> the writer's status file (status/<name>.json); one that is unreadable or lies outside the
    dump dir says so instead of stopping the reader."""
    from .export import ExportError, inside
    from .status import STATUS_DIR

    out = {}
    for st in sorted((d / STATUS_DIR).glob("*.json")) if (d / STATUS_DIR).is_dir() else []:
        try:
            s = json.loads(inside(d, f"{STATUS_DIR}/{st.name}").read_text())
            out[st.stem] = s if isinstance(s, dict) else {"state": "unreadable", "error": "not a JSON object"}
        except (OSError, ValueError, ExportError) as e:
            out[st.stem] = {"state": "unreadable", "error": str(e)}
    return out


def require_server_dumping_to(dump_dir) -> dict:
    """The dump dir's meta, once its meta and status files show a server dumping into it (not stopped,
    not discarding); else ClientError saying what to fix."""
    d = Path(dump_dir)
    meta = d / META_FILE
    if not meta.exists():
        raise ClientError(f"{meta} not found: the server is not dumping to {d} (is {ENV_DIR} set to this path, "
                          f"SGLANG_EAGLE3_EXT=1, and the dir shared with this client? see the server log for "
                          f"'dump: DISABLED')")
    for name, s in writer_status(d).items():
        if s.get("state") == "stopped":
            raise ClientError(f"writer {name} stopped: {s.get('error')} (fix it and restart the server)")
        if s.get("state") == "discarding":
            raise ClientError(f"writer {name} writes nothing: the server runs with {ENV_DISCARD}=1 (a benchmarking "
                              f"aid); restart it without that variable to dump")
    try:
        return json.loads(meta.read_text())
    except (OSError, ValueError) as e:
        raise ClientError(f"{meta}: unreadable ({e}); is {d} a dump dir?") from None


class Tokenizer:
    def __init__(self, name):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(name, trust_remote_code=True)

    def ids(self, sample: dict, generation_prompt: bool) -> list[int]:
        if sample["kind"] == "text":
            return list(self.tok(sample["value"], add_special_tokens=True)["input_ids"])
        out = self.tok.apply_chat_template(sample["value"], tokenize=True, add_generation_prompt=generation_prompt)
        if isinstance(out, dict):
            out = out["input_ids"]
        return list(out)


def _generate(srv, ids, rid, max_new_tokens, temperature=0.0, timeout=600.0):
    return srv.post("/generate", {"input_ids": ids, "rid": rid,
                                  "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature}},
                    timeout=timeout)


def run(args) -> int:
    meta = require_server_dumping_to(args.dump_dir)
    from ..http_client import Server

    srv = Server(args.url)
    info = server_info(srv)
    skip_tok = bool(info.get("skip_tokenizer_init"))
    samples, bad = read_samples(args.data, args.limit)
    tail = ManifestTail(args.dump_dir)
    tail.poll()
    todo = [s for s in samples if s["id"] not in tail.ids]
    need_tok = any(s["kind"] != "input_ids" for s in todo)
    tok = None
    if need_tok:
        name = args.tokenizer or (None if skip_tok else info.get("tokenizer_path") or info.get("model_path"))
        if name is None:
            raise ClientError("text/messages lines need a tokenizer: this server runs with --skip-tokenizer-init "
                              "(it only accepts token ids); pass --target MODEL_DIR or send input_ids")
        tok = Tokenizer(name)
    log.info("dump run: %d samples (%d already in the manifest, %d lines skipped); layers %s", len(samples),
             len(samples) - len(todo), bad, meta.get("layer_indices_hf"))

    failed: dict[str, str] = {}
    stop = threading.Event()
    gen_log = open(Path(args.dump_dir) / GENERATED_FILE, "a") if args.generate else None
    gen_lock = threading.Lock()

    def one(s):
        if stop.is_set():
            return
        ids = s["value"] if s["kind"] == "input_ids" else tok.ids(s, generation_prompt=args.generate)
        if args.generate:
            out = _generate(srv, ids, f"{NODUMP_RID_PREFIX}{s['id']}-{uuid.uuid4().hex[:8]}",
                            args.max_new_tokens, args.temperature, args.timeout)
            gen = out.get("output_ids")
            if gen is None:
                if tok is None:
                    raise ClientError("the server returned no output_ids; pass --target MODEL_DIR")
                gen = tok.tok(out["text"], add_special_tokens=False)["input_ids"]
            prompt_len, ids = len(ids), list(ids) + list(gen)
            with gen_lock:  # before the dump request: a listed sample always has its mask
                gen_log.write(json.dumps({"id": s["id"], "prompt_len": prompt_len, "len": len(ids)}) + "\n")
                gen_log.flush()
        _generate(srv, list(ids), s["id"], 1, 0.0, args.timeout)

    bar = None
    try:
        from tqdm import tqdm

        bar = tqdm(total=len(samples), initial=len(samples) - len(todo), unit="sample", disable=args.quiet)
    except ImportError:
        pass
    t0, base_n, base_tok, base_b = time.monotonic(), len(tail.ids), tail.tokens, tail.bytes
    sent = set()

    def refresh():
        tail.poll()
        if bar is not None:
            bar.n = len(tail.ids & {s["id"] for s in samples}) if len(samples) < 200_000 else len(tail.ids)
            dt = max(time.monotonic() - t0, 1e-6)
            bar.set_postfix_str(f"{(len(tail.ids) - base_n) / dt:.1f} samples/s {(tail.tokens - base_tok) / dt:,.0f} "
                                f"tok/s {(tail.bytes - base_b) / 1e9:.2f} GB")
            bar.refresh()

    with ThreadPoolExecutor(args.concurrency) as pool:
        pending = {}
        it = iter(todo)
        while True:
            while len(pending) < args.concurrency * 2:
                s = next(it, None)
                if s is None:
                    break
                pending[pool.submit(one, s)] = s
                sent.add(s["id"])
            if not pending:
                break
            done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in done:
                s = pending.pop(f)
                e = f.exception()
                if e is not None:
                    failed[s["id"]] = f"{type(e).__name__}: {e}"
                    log.warning("sample %s failed: %s", s["id"], failed[s["id"]])
                    if isinstance(e, ClientError):
                        stop.set()
            refresh()
    # Writes are asynchronous: wait for the manifest to list what was sent.
    deadline = time.monotonic() + args.wait_s
    while time.monotonic() < deadline and not (sent - set(failed)) <= tail.ids:
        time.sleep(0.5)
        refresh()
        try:
            require_server_dumping_to(args.dump_dir)
        except ClientError as e:
            failed["<writer>"] = str(e)
            break
    if bar is not None:
        bar.close()
    if gen_log is not None:
        gen_log.close()
    missing = sorted(sent - tail.ids - set(failed))
    dt = time.monotonic() - t0
    summary = {"samples": len(samples), "already_done": len(samples) - len(todo), "sent": len(sent),
               "written": len(sent & tail.ids), "failed_requests": len(failed), "not_written": len(missing),
               "malformed_lines": bad, "seconds": round(dt, 1),
               "tokens_written": tail.tokens - base_tok, "gb_written": round((tail.bytes - base_b) / 1e9, 3),
               "dump_dir": str(args.dump_dir)}
    print(json.dumps(summary, indent=2))
    if missing:
        log.warning("%d sent samples are not in the manifest (refused: prefix cache / NaN / writer stopped; see "
                    "the server log and %s/status/); e.g. %s", len(missing), args.dump_dir, missing[:5])
    return 0 if not failed and not missing else 1


def _loss_masks_and_order(data):
    if not data:
        return None, None
    samples, _ = read_samples(data)
    return [s["id"] for s in samples], {s["id"]: s["loss_mask"] for s in samples if s.get("loss_mask")}


def generated_loss_masks(dump_dir) -> dict:
    """Response-only masks of `run --generate` samples (last record per id wins: a re-run regenerates)."""
    from .export import inside

    masks = {}
    if (Path(dump_dir) / GENERATED_FILE).exists():
        for line in inside(dump_dir, GENERATED_FILE).read_text().splitlines():
            try:
                r = json.loads(line)
                masks[r["id"]] = [0] * r["prompt_len"] + [1] * (r["len"] - r["prompt_len"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line after a crash
    return masks


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
    n = fn(args.dump_dir, args.out, order=order, loss_masks=masks, workers=max(1, args.workers),
           progress=not args.quiet)
    print(json.dumps({"exported": n, "to": args.to, "out": str(args.out)}))
    return 0


def status(args) -> int:
    from .export import require_dump_dir
    from .manifest import read_manifest

    d = require_dump_dir(args.dump_dir)  # a mistyped path is an error, not "0 samples"
    man = read_manifest(d)
    st = writer_status(d)
    print(json.dumps({"complete_samples": len(man), "tokens": sum(r.get("num_tokens", 0) for r in man.values()),
                      "bytes": sum(r.get("bytes", 0) for r in man.values()), "writers": st}, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang_eagle3_ext.dump", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="send a JSONL dataset to a dumping server")
    from .. import cli_common

    r.add_argument("--url", default="http://127.0.0.1:30000", help="the dumping SGLang server")
    r.add_argument("--data", required=True, metavar="PATH", help="JSONL dataset (input lines: see above)")
    r.add_argument("--dump-dir", required=True, help="the server's SGLANG_EAGLE3_EXT_DUMP_DIR, as seen from here")
    r.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    r.add_argument("--target", dest="tokenizer", metavar="DIR",
                   help="target model dir or HF id whose tokenizer turns text/messages into token ids "
                        "(default: the server's own tokenizer)")
    cli_common.hidden_alias(r, "--tokenizer", dest="tokenizer")
    r.add_argument("--generate", action="store_true", help="target writes a response first; dump prompt+response")
    r.add_argument("--max-new-tokens", type=int, default=512, help="response length with --generate")
    r.add_argument("--temperature", type=float, default=0.0, help="sampling temperature with --generate")
    r.add_argument("--limit", type=int, help="send only the first N samples")
    r.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds to wait for one reply")
    r.add_argument("--wait-s", type=float, default=300.0, help="how long to wait for the last writes")
    r.add_argument("--quiet", action="store_true", help="no progress output")
    e = sub.add_parser("export", help="convert a dump for speculators or SpecForge")
    e.add_argument("--dump-dir", required=True, help="the dump directory (the server's SGLANG_EAGLE3_EXT_DUMP_DIR)")
    e.add_argument("--to", choices=("speculators", "specforge"), required=True, help="output format")
    e.add_argument("--out", required=True, help="output directory")
    e.add_argument("--data", help="the JSONL used for the dump: sample order and loss_mask fields")
    e.add_argument("--workers", type=int, default=8, help="samples converted in parallel (threads: file io and "
                   "tensor copies release the GIL)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    s = sub.add_parser("status", help="manifest and writer status")
    s.add_argument("--dump-dir", required=True, help="the dump directory")
    return cli_common.finish(p, "dump")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)   # its retries: the final error says it once
    args = build_parser().parse_args(argv)
    from ..cli_common import CliError   # http_client.ServerError among them

    try:
        return {"run": run, "export": export, "status": status}[args.cmd](args)
    except (ClientError, CliError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the export's own errors are user-facing
        from .export import ExportError

        if isinstance(e, ExportError):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise
