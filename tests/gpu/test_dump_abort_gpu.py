"""GPU: requests aborted mid-prefill must not leak the dump's host memory or slow it down.

One server (tiny target, chunked prefill 256, 2K-token prompts, radix cache off), four phases:
  warm-up   16 sequential requests: L = the latency of one lone 2K prefill (8 chunks)
  baseline  200 normal requests (concurrency 32): the dump rate of a server that has seen no abort
  aborts    100 aborted + ~100 normal requests, by both routes a user has:
              A  /abort_request, sent a random fraction of L after the request (lands mid-prefill)
              B  client disconnect (socket closed), a burst behind ~1 s of queued normal requests, so
                 SGLang's disconnect check (SGLANG_REQUEST_STATE_WAIT_TIMEOUT=1 s) fires while they prefill
  after     200 normal requests, as the baseline
Checks: every normal request dumped; the writer's pending bytes and half-stitched requests back to 0;
staging-ring fallbacks do not grow after the aborts (no more than in the baseline); the server never hangs
(every call bounded) and stays healthy; after/baseline dump rate >= 0.90. Prints both rates and the ratio,
and how many aborts landed mid-prefill (the writer's `ended_unfinished` counter). About 3 minutes.
"""

from __future__ import annotations

import json
import math
import random
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from gpu_helpers import activation_env, free_port, http_json, server_args, sglang_server, wait_for

pytestmark = pytest.mark.gpu
PROMPT = 2048
N = 200
CONCURRENCY = 32
MIN_RATIO = 0.90


def _prompt(g) -> list[int]:
    return torch.randint(10, 4000, (PROMPT,), generator=g).tolist()


def _payload(rid: str, ids) -> dict:
    return {"rid": rid, "input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}


def _status(dump) -> dict:
    try:
        return json.loads((dump / "status" / "dp0.json").read_text())["stats"]
    except (OSError, ValueError, KeyError):
        return {}


def _dumped(dump) -> dict:
    from sglang_eagle3_ext.dump.manifest import read_manifest

    return read_manifest(dump)


def _settled(dump, written: int):
    """The status file (refreshed every few seconds) shows `written` samples and nothing held."""
    s = _status(dump)
    return s if s.get("written", -1) >= written and s.get("pending_bytes") == 0 and s.get("partials") == 0 else None


def _normal_phase(base, dump, rids, g) -> float:
    """Send `rids` (concurrency 32), return the dump rate: samples listed per second from the first send."""
    prompts = {r: _prompt(g) for r in rids}
    t0 = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as ex:
        list(ex.map(lambda r: http_json(base + "/generate", _payload(r, prompts[r]), timeout=120), rids))
    wait_for(lambda: set(rids) <= set(_dumped(dump)), 300, "every normal request in the manifest", poll=0.05)
    return len(rids) / (time.monotonic() - t0)


def _abort_by_endpoint(base, rids, lone_s: float, g) -> None:
    """Route A: one request at a time, /abort_request after a random part of a lone prefill."""
    rnd = random.Random(0)
    for rid in rids:
        normal = rid.replace("abortA", "mixA")
        http_json(base + "/generate", _payload(normal, _prompt(g)), timeout=120)
        t = threading.Thread(
            target=lambda r=rid, p=_prompt(g): _ignore(  # noqa: B008 - the prompt is bound now, per thread
                lambda: http_json(base + "/generate", _payload(r, p), timeout=120)
            ),
            daemon=True,
        )
        t.start()
        time.sleep(lone_s * rnd.uniform(0.2, 0.7))
        http_json(base + "/abort_request", {"rid": rid}, timeout=30)
        t.join(120)
        assert not t.is_alive(), f"{rid}: no answer 120 s after its abort"


def _abort_by_disconnect(base, port, ahead, rids, lone_s: float, g) -> None:
    """Route B: `ahead` queued normal requests (~1 s of prefill), then a burst of requests whose client goes
    away at once; SGLang notices at its next 1 s check, as their prefill runs."""
    with ThreadPoolExecutor(len(ahead)) as ex:
        futs = [ex.submit(http_json, base + "/generate", _payload(r, _prompt(g)), 120) for r in ahead]
        time.sleep(0.05)
        for rid in rids:
            body = json.dumps(_payload(rid, _prompt(g))).encode()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(
                    b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
            time.sleep(lone_s / 3)
        for f in futs:
            f.result(timeout=120)


def _ignore(fn):
    try:
        fn()
    except Exception:  # noqa: BLE001 - an aborted request may answer with an error
        pass


def _fallbacks(dump) -> int:
    return int(_status(dump).get("staging_fallbacks", 0))


def test_aborted_requests_leak_nothing_and_cost_no_rate(tiny_target, tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    env = activation_env(
        tmp_path,
        SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump),
        SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB="2048",
        SGLANG_REQUEST_STATE_WAIT_TIMEOUT="1",
    )
    args = [
        "--model-path",
        str(tiny_target),
        *server_args("triton"),
        "--chunked-prefill-size",
        "256",
        "--disable-radix-cache",
    ]
    try:  # the dump refuses prefill CUDA graphs where a release would capture them
        from sglang.srt.server_args import ServerArgs

        from sglang_eagle3_ext.in_server.dump.prefill_graphs import refusal

        if refusal(ServerArgs(model_path=str(tiny_target), skip_tokenizer_init=True, attention_backend="triton")):
            args.append("--disable-prefill-cuda-graph")
    except ImportError:
        pass
    g = torch.Generator().manual_seed(0)
    port = free_port()
    fig = {}
    with sglang_server(args, name="dump_abort", port=port, env=env, launcher="sglang.launch_server") as (base, log, _):
        lat = []
        for i in range(16):
            t = time.monotonic()
            http_json(base + "/generate", _payload(f"warm-{i:03d}", _prompt(g)), timeout=120)
            lat.append(time.monotonic() - t)
        lone = statistics.median(lat[4:])
        fig["lone_prefill_ms"] = round(lone * 1000, 1)

        base_rids = [f"base-{i:03d}" for i in range(N)]
        fig["rate_baseline"] = _normal_phase(base, dump, base_rids, g)
        s = wait_for(lambda: _settled(dump, 16 + N), 60, "the writer to settle after the baseline", poll=0.05)
        fb0, ended0 = _fallbacks(dump), s.get("ended_unfinished", 0)

        # aborts: 50 by /abort_request (each after a normal request), 50 by disconnect behind ~1 s of queue
        a_rids = [f"abortA-{i:03d}" for i in range(N // 4)]
        _abort_by_endpoint(base, a_rids, lone, g)
        ahead = [f"mixB-{i:03d}" for i in range(min(100, math.ceil(1.0 / lone)))]
        b_rids = [f"abortB-{i:03d}" for i in range(N // 4)]
        _abort_by_disconnect(base, port, ahead, b_rids, lone, g)
        normal_mid = [r.replace("abortA", "mixA") for r in a_rids] + ahead
        wait_for(
            lambda: set(normal_mid) <= set(_dumped(dump)), 120, "the normal requests between the aborts", poll=0.05
        )
        time.sleep(3)  # SGLang's disconnect checks of the last burst have fired
        fb1 = _fallbacks(dump)

        after_rids = [f"after-{i:03d}" for i in range(N)]
        fig["rate_after_aborts"] = _normal_phase(base, dump, after_rids, g)
        done = _dumped(dump)
        s = wait_for(
            lambda: _settled(dump, len(done)), 60, "pending bytes and half-stitched requests back to 0", poll=0.05
        )
        fb2 = _fallbacks(dump)
        http_json(base + "/health", timeout=10)  # still serving: no hang

    fig["ratio"] = fig["rate_after_aborts"] / fig["rate_baseline"]
    aborted = [r for r in done if r.startswith("abort")]
    fig.update(
        aborts_sent=len(a_rids) + len(b_rids),
        normal_in_abort_phase=len(normal_mid),
        aborted_but_finished_first=len(aborted),
        ended_unfinished=s.get("ended_unfinished", 0) - ended0,
        staging_fallbacks={"baseline": fb0, "after_aborts_phase": fb1, "end": fb2},
        pending_bytes=s["pending_bytes"],
        partials=s["partials"],
        write_errors=s.get("write_errors"),
    )
    print("DUMP_ABORT_FIGURES " + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in fig.items()}))
    assert set(base_rids + normal_mid + after_rids) <= set(done), "every normal request dumped"
    assert all(done[r]["num_tokens"] == PROMPT for r in aborted), "an aborted request listed incomplete"
    assert fig["ended_unfinished"] >= 10, f"too few aborts landed mid-prefill to test anything: {fig}"
    assert s["pending_bytes"] == 0 and s["partials"] == 0
    assert fb2 - fb1 <= fb0, f"ring fallbacks grew after the aborts: {fig['staging_fallbacks']}"
    assert fig["ratio"] >= MIN_RATIO, f"dump rate after aborts {fig['ratio']:.3f} x the baseline's"
