"""Acceptance benchmark: `python -m sglang_eagle3_ext.bench --url http://HOST:PORT [--baseline-url ...]`.

Sends a prompt set with greedy decoding to a server with speculative decoding (and optionally to
a baseline without), and reports accept length, accept rate, output tokens/s and speedup, as a
table and as JSON. Exits non-zero when the draft is evidently unused (accept length <= 1.05), or
when greedy outputs differ from the baseline's (speculation must not change greedy results).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import random
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field

NOT_USED_THRESHOLD = 1.05
CAUSES = ("usual causes: the target sends 1x hidden instead of K x hidden (aux capture off: the fc is skipped); "
          "the draft's trained layer was dropped at load (layers.0.* vs midlayer.*); aux layer indices differ "
          "between the dump used for training and serving; wrong --speculative-algorithm; an untrained draft. "
          "Run `python -m sglang_eagle3_ext.check DRAFT --target TARGET` and start the server with SGLANG_EAGLE3_EXT=1.")


def post(url: str, payload: dict | None = None, timeout: float = 600) -> dict:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def builtin_prompts(name: str, n: int, seed: int, vocab: int = 4096, length: int = 64) -> list[dict]:
    """Built-in sets need no tokenizer (servers started with --skip-tokenizer-init)."""
    if name != "random-ids":
        raise SystemExit(f"unknown built-in prompt set {name!r}; available: random-ids")
    rng = random.Random(seed)
    return [{"input_ids": [rng.randrange(vocab) for _ in range(length)]} for _ in range(n)]


def load_prompts(path: str) -> list[dict]:
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{i}: not JSON ({e})") from None
            if "input_ids" in rec:
                out.append({"input_ids": rec["input_ids"]})
            elif "text" in rec or "prompt" in rec:
                out.append({"text": rec.get("text", rec.get("prompt"))})
            else:
                raise SystemExit(f"{path}:{i}: needs 'input_ids' or 'text'")
    return out


@dataclass
class RunResult:
    url: str
    requests: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    verify_ct: int = 0
    accept_length: float | None = None
    accept_rate: float | None = None
    server_avg_accept_length: float | None = None
    outputs: list = field(default_factory=list, repr=False)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0


def server_accept_length(url: str) -> float | None:
    for path in ("/get_server_info", "/server_info"):  # renamed in 0.5.23
        try:
            info = post(url + path)
        except (urllib.error.URLError, OSError, ValueError):
            continue
        states = info.get("internal_states") or [{}]
        v = states[0].get("avg_spec_accept_length")
        if v is not None:
            return float(v)
    return None


def run(url: str, prompts: list[dict], max_new_tokens: int, concurrency: int) -> RunResult:
    res = RunResult(url=url)
    rates = []

    def one(p):
        body = {**p, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
        return post(url + "/generate", body)

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        outs = list(ex.map(one, prompts))
    res.wall_s = time.perf_counter() - t0
    for o in outs:
        meta = o.get("meta_info", {})
        n = int(meta.get("completion_tokens", len(o.get("output_ids", []))))
        res.requests += 1
        res.output_tokens += n
        res.verify_ct += int(meta.get("spec_verify_ct", 0) or 0)
        if meta.get("spec_accept_rate") is not None:
            rates.append(float(meta["spec_accept_rate"]))
        res.outputs.append(o.get("output_ids", o.get("text")))
    if res.verify_ct:  # accept length = tokens per verify step (accepted drafts + 1 bonus)
        res.accept_length = res.output_tokens / res.verify_ct
    res.accept_rate = sum(rates) / len(rates) if rates else None
    res.server_avg_accept_length = server_accept_length(url)
    return res


def verdict(spec: RunResult, base: RunResult | None) -> tuple[bool, str]:
    al = spec.accept_length if spec.accept_length is not None else spec.server_avg_accept_length
    if al is None:
        return False, "FAIL: the server reported no speculative statistics: is --speculative-algorithm set? " + CAUSES
    if al <= NOT_USED_THRESHOLD:
        return False, f"FAIL: the draft is not being used: accept length {al:.2f} <= {NOT_USED_THRESHOLD}; " + CAUSES
    if base is not None:
        diff = sum(a != b for a, b in zip(spec.outputs, base.outputs))
        if diff:
            return False, f"FAIL: {diff}/{spec.requests} greedy outputs differ from the baseline: speculation changed results"
    return True, f"OK: accept length {al:.2f}" + (f", speedup {spec.tokens_per_s / base.tokens_per_s:.2f}x, "
                                                 f"greedy outputs identical" if base else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_eagle3_ext.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="server with speculative decoding")
    ap.add_argument("--baseline-url", help="same target without speculative decoding")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompts", help="JSONL: {'input_ids': [...]} or {'text': ...} per line")
    src.add_argument("--builtin", default="random-ids", help="built-in prompt set (default random-ids)")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=4096, help="for built-in token-id prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--json", help="also write the results as JSON here")
    a = ap.parse_args(argv)
    prompts = load_prompts(a.prompts) if a.prompts else builtin_prompts(a.builtin, a.num_prompts, a.seed, a.vocab_size)
    spec = run(a.url, prompts, a.max_new_tokens, a.concurrency)
    base = run(a.baseline_url, prompts, a.max_new_tokens, a.concurrency) if a.baseline_url else None
    ok, line = verdict(spec, base)
    rows = [("requests", spec.requests, base.requests if base else ""),
            ("output tokens", spec.output_tokens, base.output_tokens if base else ""),
            ("output tokens/s", f"{spec.tokens_per_s:.1f}", f"{base.tokens_per_s:.1f}" if base else ""),
            ("accept length", f"{spec.accept_length:.3f}" if spec.accept_length else "n/a", ""),
            ("accept rate", f"{spec.accept_rate:.3f}" if spec.accept_rate is not None else "n/a", ""),
            ("server avg accept length", spec.server_avg_accept_length or "n/a", "")]
    print(f"{'':26} {'speculative':>14} {'baseline':>10}")
    for k, v, b in rows:
        print(f"{k:26} {v!s:>14} {b!s:>10}")
    print(line)
    if a.json:
        out = {"spec": {k: v for k, v in asdict(spec).items() if k != "outputs"}, "ok": ok, "verdict": line}
        out["spec"]["tokens_per_s"] = spec.tokens_per_s
        if base:
            out["baseline"] = {"tokens_per_s": base.tokens_per_s, "output_tokens": base.output_tokens}
            out["speedup"] = spec.tokens_per_s / base.tokens_per_s if base.tokens_per_s else None
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
