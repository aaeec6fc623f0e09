"""The dump driver: feed a dumping SGLang server a JSONL dataset, follow what its writers list, and export or
summarise the dump (`sglang-eagle3 dump run | export | status` is its command line).

run     every sample is one prefill (rid = sanitised sample id); samples already in the manifest are not sent
        again (resume). With `generate` the target first writes a response (rid prefix "nodump-": that prefill
        is not dumped), then prompt+response is dumped.
export  the manifest's samples in a training tool's layout (dump/exporters/: one module per format).
status  what the manifest and the writers' status files say.

The dump dir must be visible here (shared filesystem): resume and completion are read from its manifests.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

from ..boundary import BadInput
from ..server.http_client import Server
from ..server.replies import generate_reply
from . import exporters
from .client_files import (
    ClientError,
    ManifestTail,
    generated_loss_masks,
    read_samples,
    require_server_dumping_to,
    skip_counters,
    writer_status,
)
from .config import GENERATED_FILE, NODUMP_RID_PREFIX
from .export import require_dump_dir
from .manifest import read_manifest
from .run_options import RunOptions

log = logging.getLogger("sglang_eagle3_ext.dump.driver")


@dataclasses.dataclass
class RunResult:
    summary: dict  # counts, tokens, GB, seconds, the writers' skip counters
    missing: list[str]  # sent, answered, and not in the manifest
    fatal: Exception | None  # the refusal that stopped the run early (every later sample alike)

    @property
    def ok(self) -> bool:
        s = self.summary
        return not s["failed_requests"] and not self.missing and not s["malformed_lines"]


class Tokenizer:
    """The tokenizer of the model the user named as the target (never one a server's reply names)."""

    def __init__(self, tok):
        self.tok = tok

    def ids(self, sample: dict, generation_prompt: bool) -> list[int]:
        if sample["kind"] == "text":
            return list(self.tok(sample["value"], add_special_tokens=True)["input_ids"])
        out = self.tok.apply_chat_template(sample["value"], tokenize=True, add_generation_prompt=generation_prompt)
        if isinstance(out, dict) or hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)


def _generate(srv, ids, rid, max_new_tokens, temperature=0.0, timeout=600.0):
    return srv.post(
        "/generate",
        {
            "input_ids": ids,
            "rid": rid,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature},
        },
        timeout=timeout,
    )


def _inputs(opts: RunOptions, load_tokenizer):
    """Everything local, checked before the server is asked anything: (samples, malformed, duplicates, the
    dump's meta, the manifest's tail, the tokenizer or None)."""
    samples, bad, dups = read_samples(opts.data, opts.limit)
    if not samples:
        raise ClientError(f"--data {opts.data}: no sample to send ({bad} malformed lines, each named above)")
    meta = require_server_dumping_to(opts.dump_dir)
    tail = ManifestTail(opts.dump_dir)
    tail.poll()
    tok = None
    if any(s["kind"] != "input_ids" and s["id"] not in tail.ids for s in samples):
        if not opts.target:
            raise ClientError(
                f"--data {opts.data}: text/messages lines need the target's tokenizer: pass --target "
                "DIR (the model the server serves; a tokenizer is never loaded from a path the server "
                "names), plus --trust-remote-code if its tokenizer ships code you trust; or send input_ids"
            )
        tok = Tokenizer(load_tokenizer(opts.target, opts.trust_remote_code))
    return samples, bad, dups, meta, tail, tok


class _Sender:
    """Sends the samples, `concurrency` in flight, and follows the manifest: progress bar, what failed, and
    the first refusal that makes every later sample fail alike (a malformed reply, a missing tokenizer)."""

    def __init__(self, opts: RunOptions, srv, tok, tail: ManifestTail, samples: list[dict], done: int):
        self.opts, self.srv, self.tok, self.tail, self.samples = opts, srv, tok, tail, samples
        self.failed: dict[str, str] = {}
        self.fatal: Exception | None = None
        self.sent: set[str] = set()
        self.stop = threading.Event()
        self.gen_lock = threading.Lock()
        self.gen_log = open(Path(opts.dump_dir) / GENERATED_FILE, "a") if opts.generate else None
        self.t0, self.base = time.monotonic(), (len(tail.ids), tail.tokens, tail.bytes)
        self.bar = None
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=len(samples), initial=done, unit="sample", disable=not opts.progress)
        except ImportError:
            pass

    def one(self, s) -> None:

        if self.stop.is_set():
            return
        o, tok = self.opts, self.tok
        ids = s["value"] if s["kind"] == "input_ids" else tok.ids(s, generation_prompt=o.generate)
        if o.generate:
            where = self.srv.where("POST", "/generate")
            out = generate_reply(
                _generate(
                    self.srv,
                    ids,
                    f"{NODUMP_RID_PREFIX}{s['id']}-{uuid.uuid4().hex[:8]}",
                    o.max_new_tokens,
                    o.temperature,
                    o.timeout,
                ),
                where,
            )
            gen = out["output_ids"]
            if gen is None:
                if tok is None:
                    raise ClientError(f"{where}: the reply has no output_ids, only text; pass --target DIR")
                gen = tok.tok(out["text"], add_special_tokens=False)["input_ids"]
            prompt_len, ids = len(ids), list(ids) + list(gen)
            with self.gen_lock:  # before the dump request: a listed sample always has its mask
                self.gen_log.write(json.dumps({"id": s["id"], "prompt_len": prompt_len, "len": len(ids)}) + "\n")
                self.gen_log.flush()
        _generate(self.srv, list(ids), s["id"], 1, 0.0, o.timeout)

    def refresh(self) -> None:
        tail, bar = self.tail, self.bar
        tail.poll()
        if bar is not None:
            n0, tok0, b0 = self.base
            bar.n = len(tail.ids & {s["id"] for s in self.samples}) if len(self.samples) < 200_000 else len(tail.ids)
            dt = max(time.monotonic() - self.t0, 1e-6)
            bar.set_postfix_str(
                f"{(len(tail.ids) - n0) / dt:.1f} samples/s {(tail.tokens - tok0) / dt:,.0f} "
                f"tok/s {(tail.bytes - b0) / 1e9:.2f} GB"
            )
            bar.refresh()

    def send(self, todo: list[dict]) -> None:
        c = self.opts.concurrency
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
        if isinstance(e, (ClientError, BadInput)) and self.fatal is None:  # the next would fail alike
            self.fatal = e
            self.stop.set()

    def await_writes(self) -> None:
        """Writes are asynchronous: wait (wait_s) for the manifest to list what was sent."""
        deadline = time.monotonic() + self.opts.wait_s
        left = len(self.sent - set(self.failed) - self.tail.ids)
        if left and self.opts.wait_s > 0:
            log.info("waiting up to %g s for the writers to list %d more samples (--wait-s)", self.opts.wait_s, left)
        while time.monotonic() < deadline and not (self.sent - set(self.failed)) <= self.tail.ids:
            time.sleep(0.5)
            self.refresh()
            try:
                require_server_dumping_to(self.opts.dump_dir)
            except ClientError as e:
                self.failed["<writer>"] = str(e)
                break

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.gen_log is not None:
            self.gen_log.close()


def run(opts: RunOptions, load_tokenizer: Callable[[str, bool], object]) -> RunResult:
    """Send the dataset to the server, wait for the writers, and say what happened. `load_tokenizer(name,
    trust_remote_code)` is called only when text/messages samples remain to be sent."""
    samples, bad, dups, meta, tail, tok = _inputs(opts, load_tokenizer)
    from ..server.replies import server_args

    srv = Server(opts.url, timeout=opts.timeout)
    info = srv.server_info()
    if info is None:
        raise ClientError(f"server {srv.url} answers neither /get_server_info nor /server_info: is it SGLang?")
    server_args(info, srv.where("GET", "/get_server_info"))  # a server that answers sanely
    todo = [s for s in samples if s["id"] not in tail.ids]
    log.info(
        "dump run: %d samples (%d already in the manifest, %d malformed lines, %d duplicate ids skipped); layers %s",
        len(samples),
        len(samples) - len(todo),
        bad,
        dups,
        meta.get("layer_indices_hf"),
    )
    job = _Sender(opts, srv, tok, tail, samples, len(samples) - len(todo))
    try:
        job.send(todo)
        job.await_writes()
    finally:
        job.close()
    sent, failed = job.sent, job.failed
    n0, tok0, b0 = job.base
    summary = {
        "samples": len(samples),
        "already_done": len(samples) - len(todo),
        "sent": len(sent),
        "written": len(sent & tail.ids),
        "failed_requests": len(failed),
        "not_written": len(sent - tail.ids - set(failed)),
        "malformed_lines": bad,
        "duplicate_ids": dups,
        "seconds": round(time.monotonic() - job.t0, 1),
        "tokens_written": tail.tokens - tok0,
        "gb_written": round((tail.bytes - b0) / 1e9, 3),
        "dump_dir": str(opts.dump_dir),
        **skip_counters(writer_status(Path(opts.dump_dir))),
    }
    return RunResult(summary, sorted(sent - tail.ids - set(failed)), job.fatal)


def warn_unfinished(opts: RunOptions, res: RunResult) -> None:
    """Said after the summary: what was sent and not written, what was not sent."""
    if res.missing:
        log.warning(
            "%d sent samples are not in the manifest (refused: prefix cache / NaN / writer stopped; see "
            "the server log and %s/status/); e.g. %s",
            len(res.missing),
            opts.dump_dir,
            res.missing[:5],
        )
    if res.summary["malformed_lines"]:
        log.warning(
            "%d malformed lines of %s were not sent (each named above)", res.summary["malformed_lines"], opts.data
        )


def _loss_masks_and_order(data):
    """(sample order, {id: loss_mask}) from the dataset of the dump; a malformed line is an error here (it
    would silently lose its sample's mask or order)."""
    if not data:
        return None, None
    samples, _, _ = read_samples(data, strict=True)
    return [s["id"] for s in samples], {s["id"]: s["loss_mask"] for s in samples if s.get("loss_mask")}


def export(dump_dir, to: str, out, data=None, workers: int = 8, progress: bool = True) -> int:
    """Export the dump in format `to` (exporters.names()) into `out`; sample order and loss masks from the
    dataset `data` when given, response-only masks for `run --generate` samples. The number exported."""
    fn = exporters.get(to)  # an unknown format: refused before anything is read
    require_dump_dir(dump_dir)  # a mistyped path is an error, not an empty export
    order, masks = _loss_masks_and_order(data)
    gen = generated_loss_masks(dump_dir)
    if gen:
        log.info(
            "loss masks: %d generated samples train on the response only (%s); --data masks take precedence",
            len(gen),
            GENERATED_FILE,
        )
        masks = {**gen, **(masks or {})}
    return fn(dump_dir, out, order=order, loss_masks=masks, workers=workers, progress=progress)


def export_report(n: int, to: str, out) -> dict:
    """`dump export`'s report: how many samples were exported, in which format, where."""
    return {"exported": n, "to": to, "out": str(out)}


def render_export(rep: dict) -> str:
    return f"exported {rep['exported']} samples for {rep['to']} into {rep['out']}"


def status(dump_dir) -> dict:
    """The manifest's totals, the writers' skip counters summed, and every writer's status."""

    d = require_dump_dir(dump_dir)  # a mistyped path is an error, not "0 samples"
    man = read_manifest(d)
    st = writer_status(d, unreadable_listed=True)  # one bad status file hides no other writer
    return {
        "dump_dir": str(d),
        "complete_samples": len(man),
        "tokens": sum(r.get("num_tokens", 0) for r in man.values()),
        "bytes": sum(r.get("bytes", 0) for r in man.values()),
        **skip_counters(st),
        "writers": st,
    }


def _counters(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def render_status(st: dict) -> str:
    """`dump status`'s text."""
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


def render_run(sm: dict) -> str:
    """`dump run`'s summary line."""
    return (
        f"dump run: {sm['written']} of {sm['sent']} sent samples written ({sm['already_done']} of "
        f"{sm['samples']} already in the manifest), {sm['tokens_written']} tokens, {sm['gb_written']} GB in "
        f"{sm['seconds']} s; failed requests {sm['failed_requests']}, not written {sm['not_written']}, "
        f"malformed lines {sm['malformed_lines']}, duplicate ids {sm['duplicate_ids']}"
        + "".join(f", {k} {v}" for k, v in sm.items() if k.startswith("skipped"))
    )
