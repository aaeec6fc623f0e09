"""The acceptance benchmark: `benchmark(BenchOptions(url=...))` sends a prompt set with greedy decoding to a
server with speculative decoding (and to a baseline without, same target), at each concurrency level, and
returns per level: accept length, how often draft token 1, 2, 3 ... is accepted (SGLang's per-request
`meta_info`: `spec_verify_ct`, `spec_accept_histogram`), output tokens/s, the speedup over the baseline, the
steps' costs read from the servers' logs, and the verdict (bench/verdict.py)."""

from __future__ import annotations

import concurrent.futures as cf
import random
import sys
import time

from .. import __version__
from ..boundary import BadInput, regular_file
from ..server.http_client import Server, ServerError
from ..server.replies import avg_accept_length as read
from ..server.replies import generate_reply
from . import prompts as bench_prompts
from .options import BenchOptions
from .stats import RunStats
from .steps import step_summary
from .verdict import verdict

SERVER_KEYS = (
    "model_path",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "attention_backend",
    "disable_cuda_graph",
    "tp_size",
    "version",
)


def server_info(srv):
    """The server's /get_server_info reply (checked by its reader), None when it has no such route or does not
    answer: the bench runs on without it."""

    try:
        return srv.server_info()
    except ServerError:
        return None


def avg_accept_length(srv, info) -> float | None:

    return None if info is None else read(info, srv.where("GET", "/get_server_info"))


def run_level(srv, label: str, prompts: list[dict], new_tokens: list[int], concurrency: int, bar) -> RunStats:
    """Every prompt once, `concurrency` in flight; prompt i generates new_tokens[i] greedy tokens."""

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


def request_lengths(span: tuple[int, int], n: int, seed: int) -> list[int]:
    """Each request's greedy token count: fixed, or drawn from the span (seeded: both servers, every level,
    get the same length for the same prompt, so their outputs still compare token for token)."""
    rng = random.Random(f"bench-lengths-{seed}")
    return [rng.randint(*span) for _ in range(n)]


def progress_bar(total: int, quiet: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # optional: the benchmark runs without a bar

        class _Null:
            def update(self, n=1):
                pass

            def set_description(self, s):
                pass

            def close(self):
                pass

        return _Null()
    return tqdm(total=total, unit="req", disable=True if quiet else None, file=sys.stderr, dynamic_ncols=True)


def read_logs(spec_log: str | None, baseline_log: str | None) -> dict[str, str]:
    """{"spec": text, "baseline": text} of the servers' logs given (regular files only: a FIFO would block)."""

    texts = {}
    for k, p in (("spec", spec_log), ("baseline", baseline_log)):
        if not p:
            continue
        try:
            texts[k] = regular_file(p, "server log").read_text(errors="replace")
        except BadInput as e:
            raise bench_prompts.with_flag(f"--{k}-log", e) from None
        except OSError as e:
            raise BadInput(f"--{k}-log {p}", f"{e.strerror or e}") from None
    return texts


def add_step_costs(
    levels: list[dict], spec_log: str | None, baseline_log: str | None, interval: int = 1, texts: dict | None = None
) -> None:
    """lv["steps"] = {"spec": ..., "baseline": ...}: iteration and admission costs at each concurrency c > 1, from
    the servers' logs (`texts`, read before the run, or read here; each level's lines are those at a running
    batch of c)."""

    texts = read_logs(spec_log, baseline_log) if texts is None else texts
    for lv in levels:
        if texts and lv["concurrency"] > 1:
            lv["steps"] = {k: step_summary(t, lv["concurrency"], interval) for k, t in texts.items()}


def local_inputs(o: BenchOptions):
    """(prompt set, server log texts): every local input checked before any network wait."""
    texts = read_logs(o.spec_log, o.baseline_log)
    if o.prompts:
        ps = bench_prompts.from_file(o.prompts, o.num_prompts, o.tokenizer)
    else:
        ps = bench_prompts.builtin(o.builtin, o.num_prompts or max(16, 2 * max(o.concurrency)), o.seed, o.vocab_size)
    return ps, texts


def _warm_up(servers, prompts: list[dict], n: int, bar) -> None:

    for label, s in servers:
        bar.set_description(f"warm-up {label}")
        for p in (prompts[i % len(prompts)] for i in range(n)):
            generate_reply(
                s.post("/generate", {**p, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}),
                s.where("POST", "/generate"),
            )
            bar.update(1)


def _level(o: BenchOptions, servers, prompts: list[dict], lengths: list[int], c: int, n_draft, bar) -> dict:
    """Both servers at concurrency c, interleaved per level: drift hits both alike."""
    runs = {}
    for label, s in servers:
        bar.set_description(f"{label} c={c}")
        runs[label] = run_level(s, label, prompts, lengths, c, bar)
    spec = dict(servers)["spec"]
    runs["spec"].server_avg_accept_length = avg_accept_length(spec, server_info(spec))
    lv: dict = {"concurrency": c, "spec": runs["spec"].as_dict(n_draft)}
    b = runs.get("baseline")
    lv["baseline"] = b.as_dict() if b else None
    if b:
        lv["speedup"] = runs["spec"].tokens_per_s / b.tokens_per_s if b.tokens_per_s else None
        lv["greedy_mismatches"] = sum(x != y for x, y in zip(runs["spec"].outputs, b.outputs))
    return lv


def benchmark(o: BenchOptions) -> dict:
    """Run the benchmark `o` describes; returns the result (levels, verdict, `status` OK/WARNING/FAIL).
    Bad local input is BadInput; an unreachable or silent server, server/http_client's ServerError."""
    from ..server.replies import server_args

    ps, texts = local_inputs(o)
    spec = Server(o.url, timeout=o.timeout)
    base = Server(o.baseline_url, timeout=o.timeout) if o.baseline_url else None
    for s in filter(None, (spec, base)) if o.wait_for_server > 0 else ():
        s.wait_healthy(o.wait_for_server)
    info = server_info(spec)
    args = {} if info is None else server_args(info, spec.where("GET", "/get_server_info"))
    n_draft = args["speculative_num_draft_tokens"] - 1 if args.get("speculative_num_draft_tokens") else None
    servers = [("spec", spec)] + ([("baseline", base)] if base else [])
    lengths = request_lengths(o.max_new_tokens, len(ps.prompts), o.seed)
    bar = progress_bar(len(ps.prompts) * len(o.concurrency) * len(servers) + o.warmup * len(servers), o.quiet)
    try:
        _warm_up(servers, ps.prompts, o.warmup, bar)
        levels = [_level(o, servers, ps.prompts, lengths, c, n_draft, bar) for c in o.concurrency]
    finally:
        bar.close()
    add_step_costs(levels, o.spec_log, o.baseline_log, o.log_interval, texts)
    has_stats = any(lv["spec"]["verify_ct"] or lv["spec"]["server_avg_accept_length"] is not None for lv in levels)
    status, lines = verdict(levels, has_stats, o.fail_on_slower, args)
    return _result(o, args, ps, lengths, levels, status, lines)


def _result(
    o: BenchOptions, args: dict, ps, lengths: list[int], levels: list[dict], status: str, lines: list[str]
) -> dict:

    lo, hi = o.max_new_tokens
    return {
        "tool": "sglang-eagle3 bench",
        "version": __version__,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "spec_url": o.url,
        "baseline_url": o.baseline_url,
        "server": {k: args.get(k) for k in SERVER_KEYS if k in args},
        "prompts": {"source": ps.source, "count": len(ps.prompts), "notes": ps.notes},
        "max_new_tokens": lo if lo == hi else f"{lo}:{hi}",
        "new_tokens_mean": sum(lengths) / max(len(lengths), 1),
        "concurrency": list(o.concurrency),
        "levels": levels,
        # the first level's figures at the top level (what earlier versions wrote)
        "spec": levels[0]["spec"],
        "speedup": levels[0].get("speedup"),
        "status": status,
        "ok": status != "FAIL",
        "verdict": "\n".join(lines),
        "verdict_lines": lines,
    }
