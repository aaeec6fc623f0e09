"""Acceptance benchmark: `sglang-eagle3 bench --url SPEC [--baseline-url BASE] [--concurrency 1,8,32] [--report R.html]`.

Sends a prompt set with greedy decoding to a server with speculative decoding (and to a baseline without,
same target), at each concurrency level, and reports per level: accept length, how often draft token 1,
2, 3 ... is accepted (from SGLang's per-request `meta_info`: `spec_verify_ct`, `spec_accept_histogram`),
output tokens/s and the speedup over the baseline; as a table, as JSON (--json) and as a self-contained
HTML report with plots (--report; PNGs also written beside it).
Verdict: FAIL (exit 1) when the draft is evidently unused (accept length <= 1.05), when the server reports
no speculative statistics, or when greedy outputs differ from the baseline's; WARNING (exit 0, or 1 with
--fail-on-slower) when speculation is slower than the baseline. Bad input, an unreachable server or one
that does not answer within --timeout / --wait-for-server: exit 2 with one line saying which.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..bench import prompts as bench_prompts
from . import common as cli_common
from ..bench.verdict import CAUSES, NOT_USED_THRESHOLD, slower_fix, target_is_mla, verdict  # noqa: F401 - API
from .common import CliError

MAX_CONCURRENCY = 4096     # requests in flight (one client thread each)
SERVER_KEYS = ("model_path", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "attention_backend", "disable_cuda_graph", "tp_size", "version")


@dataclass
class RunStats:
    """One server at one concurrency level."""
    label: str
    concurrency: int
    requests: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    verify_ct: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    histogram: list = field(default_factory=list)   # [steps that accepted 0 drafts, 1 draft, 2 drafts, ...]
    latency_s: list = field(default_factory=list)
    outputs: list = field(default_factory=list, repr=False)
    server_avg_accept_length: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0

    @property
    def accept_length(self) -> float | None:  # tokens per verify step: accepted drafts + the bonus token
        return self.output_tokens / self.verify_ct if self.verify_ct else None

    @property
    def accept_rate(self) -> float | None:
        return self.accepted_drafts / self.proposed_drafts if self.proposed_drafts else None

    def position_acceptance(self, n_draft: int | None = None) -> list[float]:
        """[P(draft token 1 accepted), P(token 2 accepted), ...] over verify steps: a step that accepted j
        drafts accepted tokens 1..j, so P(k) = steps with j >= k / all steps."""
        steps = sum(self.histogram)
        if not steps:
            return []
        n = max(len(self.histogram) - 1, n_draft or 0)
        tail, out = steps, []
        for k in range(1, n + 1):             # steps with j >= k, one subtraction per position
            tail -= self.histogram[k - 1] if k - 1 < len(self.histogram) else 0
            out.append(tail / steps)
        return out

    def add(self, out: dict, latency: float) -> None:
        """out: a reply checked by server_replies.generate_reply."""
        meta = out["meta"]
        n = meta.get("completion_tokens", len(out["output_ids"] or []))
        self.requests += 1
        self.output_tokens += n
        self.latency_s.append(latency)
        self.verify_ct += meta.get("spec_verify_ct", 0)
        self.accepted_drafts += meta.get("spec_num_correct_drafts", meta.get("spec_accepted_drafts", 0))
        self.proposed_drafts += meta.get("spec_num_proposed_drafts", meta.get("spec_proposed_drafts", 0))
        hist = out["histogram"]
        if len(hist) > len(self.histogram):
            self.histogram += [0] * (len(hist) - len(self.histogram))
        for j, c in enumerate(hist):
            self.histogram[j] += c
        self.outputs.append(out["output_ids"] if out["output_ids"] is not None else out["text"])

    def as_dict(self, n_draft: int | None = None) -> dict:
        lat = sorted(self.latency_s)
        return {"label": self.label, "concurrency": self.concurrency, "requests": self.requests,
                "output_tokens": self.output_tokens, "wall_s": round(self.wall_s, 4),
                "tokens_per_s": self.tokens_per_s, "verify_ct": self.verify_ct, "accept_length": self.accept_length,
                "accept_rate": self.accept_rate, "accept_histogram": self.histogram,
                "position_acceptance": self.position_acceptance(n_draft),
                "server_avg_accept_length": self.server_avg_accept_length,
                "latency_p50_s": lat[len(lat) // 2] if lat else None, "latency_max_s": lat[-1] if lat else None}


def server_info(srv):
    """The server's /get_server_info reply (checked by its reader), None when it has no such route or does not
    answer: the bench runs on without it."""
    try:
        return srv.server_info()
    except CliError:
        return None


def avg_accept_length(srv, info) -> float | None:
    from ..server.replies import avg_accept_length as read

    return None if info is None else read(info, srv.where("GET", "/get_server_info"))


def run_level(srv, label: str, prompts: list[dict], new_tokens: list[int], concurrency: int, bar) -> RunStats:
    """Every prompt once, `concurrency` in flight; prompt i generates new_tokens[i] greedy tokens."""
    from ..server.replies import generate_reply

    st = RunStats(label=label, concurrency=concurrency)

    def one(p, n):
        t = time.perf_counter()
        body = {**p, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
        out = generate_reply(srv.post("/generate", body), srv.where("POST", "/generate"))
        return out, time.perf_counter() - t

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = [ex.submit(one, p, n) for p, n in zip(prompts, new_tokens)]
        try:
            results = []
            for f in futs:  # in prompt order: outputs line up with the baseline's
                results.append(f.result())
                bar.update(1)
        except BaseException:
            for f in futs:
                f.cancel()
            raise
    st.wall_s = time.perf_counter() - t0
    for out, lat in results:
        st.add(out, lat)
    return st


def _levels(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: comma-separated integers 1..{MAX_CONCURRENCY}, e.g. 1,8,32") from None
    if not out or min(out) < 1 or max(out) > MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(f"{s!r}: comma-separated integers 1..{MAX_CONCURRENCY}, e.g. 1,8,32")
    return out


def _new_tokens(s: str) -> tuple[int, int]:
    """'N' -> (N, N); 'LO:HI' -> (LO, HI): each request's length drawn from LO..HI."""
    try:
        lo, hi = (int(x) for x in s.split(":")) if ":" in s else (int(s),) * 2
    except ValueError:
        lo = hi = 0
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{s!r}: a positive integer N or a range LO:HI (1 <= LO <= HI), e.g. 128:896")
    return lo, hi


def request_lengths(span: tuple[int, int], n: int, seed: int) -> list[int]:
    """Each request's greedy token count: fixed, or drawn from the span (seeded: both servers, every level,
    get the same length for the same prompt, so their outputs still compare token for token)."""
    rng = random.Random(f"bench-lengths-{seed}")
    return [rng.randint(*span) for _ in range(n)]


def build_parser() -> argparse.ArgumentParser:
    ap = cli_common.parser("bench", cli_common.doc_description(__doc__.split("\n\n", 1)[1]))
    ap.add_argument("--url", required=True, help="server with speculative decoding")
    ap.add_argument("--baseline-url", help="the same target without speculative decoding (speedup, greedy check)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="PATH", help="JSONL, ShareGPT JSON or MT-bench question.jsonl "
                     "(records: input_ids | text | prompt | messages | conversations | turns)")
    src.add_argument("--builtin", default="random-ids", choices=bench_prompts.BUILTIN,
                     help="built-in prompt set when no --prompts")
    ap.add_argument("--target", metavar="DIR", help="target model dir or HF id: its tokenizer and chat template "
                    "turn text/chat prompts into token ids (chat prompts need it; without it text is sent as text; "
                    "a tokenizer is never loaded from a path the server names)")
    cli_common.hidden_alias(ap, "--tokenizer", dest="target")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="let --target's tokenizer run the code it ships (only for a model you trust)")
    ap.add_argument("--num-prompts", type=cli_common.positive_int, default=None,
                    help="prompts per run (default: every record of --prompts; built-in: max(16, 2 x concurrency))")
    ap.add_argument("--seed", type=int, default=0, help="seed of the built-in prompt set")
    ap.add_argument("--vocab-size", type=cli_common.positive_int, default=4096,
                    help="token-id range of the built-in prompt set")
    ap.add_argument("--max-new-tokens", type=_new_tokens, default="64", metavar="N|LO:HI",
                    help="greedy tokens per request (ignore_eos); LO:HI draws each request's count from that range "
                    "(seeded by --seed, the same for both servers). Fixed lengths let a server without speculation "
                    "finish and admit its requests in whole cohorts, which real traffic (answers of every "
                    "length) never does; speculation's requests finish out of step and are admitted more often")
    ap.add_argument("--concurrency", type=_levels, default="1,8", metavar="N[,N..]",
                    help="requests in flight; several levels run one after another, e.g. 1,8,32")
    ap.add_argument("--warmup", type=cli_common.non_negative_int, default=2,
                    help="unmeasured requests per server before the first level")
    ap.add_argument("--timeout", type=cli_common.positive_float, default=300.0, metavar="S",
                    help="seconds for one request, all of its reply included")
    ap.add_argument("--wait-for-server", type=cli_common.non_negative_float, default=60.0, metavar="S",
                    help="seconds to wait, in all, for GET /health to answer before starting (0: do not wait)")
    cli_common.add_json_out(ap)
    ap.add_argument("--report", metavar="PATH", help="write a self-contained HTML report with plots here "
                    "(PNGs beside it; needs matplotlib for the plots)")
    ap.add_argument("--fail-on-slower", action="store_true", help="exit 1 (not only warn) when slower than baseline")
    cli_common.add_verbosity(ap, quiet="no progress bar")
    ap.add_argument("--spec-log", metavar="PATH", help="the EAGLE-3 server's log, run with --decode-log-interval 1: "
                    "what one iteration and one admission cost at each concurrency (bench_steps), and advice from it")
    ap.add_argument("--baseline-log", metavar="PATH", help="the baseline server's log, likewise")
    ap.add_argument("--log-interval", type=cli_common.positive_int, default=1, metavar="N",
                    help="the servers' --decode-log-interval")
    return cli_common.finish(ap, "bench")


def _bar(total: int, quiet: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # optional: the benchmark runs without a bar
        class _Null:
            def update(self, n=1): pass
            def set_description(self, s): pass
            def close(self): pass
        return _Null()
    return tqdm(total=total, unit="req", disable=True if quiet else None, file=sys.stderr, dynamic_ncols=True)


def read_logs(spec_log: str | None, baseline_log: str | None) -> dict[str, str]:
    """{"spec": text, "baseline": text} of the servers' logs given (regular files only: a FIFO would block)."""
    from ..boundary import BadInput, regular_file

    texts = {}
    for k, p in (("spec", spec_log), ("baseline", baseline_log)):
        if not p:
            continue
        try:
            texts[k] = regular_file(p, "server log").read_text(errors="replace")
        except BadInput as e:
            raise CliError(f"--{k}-log {e}") from None
        except OSError as e:
            raise CliError(f"--{k}-log {p}: {e.strerror or e}") from None
    return texts


def add_step_costs(levels: list[dict], spec_log: str | None, baseline_log: str | None, interval: int = 1,
                   texts: dict | None = None) -> None:
    """lv["steps"] = {"spec": ..., "baseline": ...}: iteration and admission costs at each concurrency c > 1, from
    the servers' logs (`texts`, read before the run, or read here; each level's lines are those at a running
    batch of c)."""
    from ..bench.steps import step_summary

    texts = read_logs(spec_log, baseline_log) if texts is None else texts
    for lv in levels:
        if texts and lv["concurrency"] > 1:
            lv["steps"] = {k: step_summary(t, lv["concurrency"], interval) for k, t in texts.items()}


def _check_outputs(a) -> None:
    """--json / --report must be writable files-to-be, known before any server time is spent."""
    for flag, dest in (("--json", a.json if a.json != "-" else None), ("--report", a.report)):
        if not dest:
            continue
        p = Path(dest)
        if p.is_dir():
            raise CliError(f"{flag} {dest}: is a folder; give a file path")
        if flag == "--json" and not p.parent.is_dir():
            raise CliError(f"{flag} {dest}: no folder {p.parent}; create it or give another path")


def local_inputs(a):
    """(prompt set, server log texts): every local input checked before any network wait."""
    texts = read_logs(a.spec_log, a.baseline_log)
    _check_outputs(a)
    if a.prompts:
        ps = bench_prompts.from_file(a.prompts, a.num_prompts, a.target, a.trust_remote_code)
    else:
        ps = bench_prompts.builtin(a.builtin, a.num_prompts or max(16, 2 * max(a.concurrency)), a.seed, a.vocab_size)
    return ps, texts


def benchmark(a) -> dict:
    from ..server.http_client import Server
    from ..server.replies import generate_reply, server_args

    ps, texts = local_inputs(a)
    spec = Server(a.url, timeout=a.timeout)
    base = Server(a.baseline_url, timeout=a.timeout) if a.baseline_url else None
    for s in filter(None, (spec, base)) if a.wait_for_server > 0 else ():
        s.wait_healthy(a.wait_for_server)
    info = server_info(spec)
    args = {} if info is None else server_args(info, spec.where("GET", "/get_server_info"))
    n_draft = args["speculative_num_draft_tokens"] - 1 if args.get("speculative_num_draft_tokens") else None
    servers = [("spec", spec)] + ([("baseline", base)] if base else [])
    lo, hi = a.max_new_tokens
    lengths = request_lengths(a.max_new_tokens, len(ps.prompts), a.seed)
    bar = _bar(len(ps.prompts) * len(a.concurrency) * len(servers) + a.warmup * len(servers), a.quiet)
    try:
        for label, s in servers:
            bar.set_description(f"warm-up {label}")
            for p in (ps.prompts[i % len(ps.prompts)] for i in range(a.warmup)):
                generate_reply(s.post("/generate", {**p, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}),
                               s.where("POST", "/generate"))
                bar.update(1)
        levels = []
        for c in a.concurrency:
            lv: dict = {"concurrency": c}
            runs = {}
            for label, s in servers:  # interleaved per level: drift hits both servers alike
                bar.set_description(f"{label} c={c}")
                runs[label] = run_level(s, label, ps.prompts, lengths, c, bar)
            runs["spec"].server_avg_accept_length = avg_accept_length(spec, server_info(spec))
            lv["spec"] = runs["spec"].as_dict(n_draft)
            lv["baseline"] = runs["baseline"].as_dict() if base else None
            if base:
                b = runs["baseline"]
                lv["speedup"] = runs["spec"].tokens_per_s / b.tokens_per_s if b.tokens_per_s else None
                lv["greedy_mismatches"] = sum(x != y for x, y in zip(runs["spec"].outputs, b.outputs))
            levels.append(lv)
    finally:
        bar.close()
    add_step_costs(levels, a.spec_log, a.baseline_log, a.log_interval, texts)
    has_stats = any(lv["spec"]["verify_ct"] or lv["spec"]["server_avg_accept_length"] is not None for lv in levels)
    status, lines = verdict(levels, has_stats, a.fail_on_slower, args)
    from .. import __version__

    return {"tool": "sglang-eagle3 bench", "version": __version__, "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "spec_url": a.url, "baseline_url": a.baseline_url,
            "server": {k: args.get(k) for k in SERVER_KEYS if k in args},
            "prompts": {"source": ps.source, "count": len(ps.prompts), "notes": ps.notes},
            "max_new_tokens": lo if lo == hi else f"{lo}:{hi}", "new_tokens_mean": sum(lengths) / max(len(lengths), 1),
            "concurrency": a.concurrency, "levels": levels,
            # the first level's figures at the top level (what earlier versions wrote)
            "spec": levels[0]["spec"], "speedup": levels[0].get("speedup"),
            "status": status, "ok": status != "FAIL", "verdict": "\n".join(lines), "verdict_lines": lines}


def render(res: dict) -> str:
    f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "n/a"  # noqa: E731
    rows = [f"{'conc':>4} {'server':11} {'req':>5} {'out tok':>8} {'tok/s':>9} {'accept len':>10} {'accept rate':>11} "
            f"{'speedup':>8}"]
    for lv in res["levels"]:
        for r in filter(None, (lv["spec"], lv["baseline"])):
            spd = f(lv.get("speedup"), ".2f") + "x" if r is lv["spec"] and lv.get("speedup") is not None else ""
            rows.append(f"{lv['concurrency']:>4} {r['label']:11} {r['requests']:>5} {r['output_tokens']:>8} "
                        f"{r['tokens_per_s']:>9.1f} {f(r['accept_length'], '.3f'):>10} {f(r['accept_rate'], '.3f'):>11} "
                        f"{spd:>8}")
        pa = lv["spec"]["position_acceptance"]
        if pa:
            rows.append(f"     draft token accepted (c={lv['concurrency']}): "
                        + "  ".join(f"#{k} {p:.3f}" for k, p in enumerate(pa, 1)))
        for label, st in (lv.get("steps") or {}).items():
            rows.append(f"     {label} log (c={lv['concurrency']}): " + (st["error"] if "error" in st else
                        f"iteration {st['iteration_ms']:.1f} ms, admission {f(st.get('admission_ms'), '.1f')} ms per "
                        f"prefill batch x {st.get('prefill_batches', 0)}, "
                        f"{f(st.get('admission_share'), '.0%')} of the time"))
    notes = [f"prompts: {res['prompts']['source']}, new tokens per request: {res['max_new_tokens']}"
             + (f" (mean {res['new_tokens_mean']:.0f})" if isinstance(res["max_new_tokens"], str) else "")]
    notes += [f"note: {n}" for n in res["prompts"]["notes"]]
    return "\n".join(notes + rows + res["verdict_lines"])


def main(argv=None) -> int:
    from .output import library_output

    a = build_parser().parse_args(argv)
    with library_output(a.verbose):
        res = benchmark(a)
    print(render(res), file=sys.stderr if a.json == "-" else sys.stdout)
    if a.json:
        cli_common.write_json(a.json, res)
    if a.report:
        from ..bench.report import write_report

        for p in write_report(a.report, res):
            print(f"report: {p}")
    return cli_common.EXIT_FAILED if res["status"] == "FAIL" else cli_common.EXIT_OK


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("bench", main))
