"""The acceptance benchmark against a loopback server speaking SGLang's /generate schema (0.5.14/0.5.16 meta_info:
spec_verify_ct, spec_num_correct_drafts, spec_num_proposed_drafts, spec_accept_histogram), its verdicts,
per-position acceptance, concurrency levels, report and the bounded waits on a silent server."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_eagle3_ext.bench.run import add_step_costs
from sglang_eagle3_ext.bench.verdict import slower_fix, target_is_mla
from sglang_eagle3_ext.boundary import BadInput
from sglang_eagle3_ext.cli import bench

N_DRAFT = 3  # speculative_num_draft_tokens 4


def serve(accept_p: float | None, shift: int = 0, delay_s: float = 0.0, health: bool = True, reply: str = "ok"):
    """A fake SGLang server. accept_p: each draft token is accepted with this probability given the one before
    was (None: no speculation). Per request it draws the verify steps and reports them as SGLang does."""
    seen = {"generate": 0}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _reply(self, out, code=200):
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self._reply({}, 200 if health else 503)
            if self.path == "/get_server_info":
                return self._reply(
                    {
                        "speculative_num_draft_tokens": N_DRAFT + 1 if accept_p is not None else None,
                        "speculative_num_steps": N_DRAFT if accept_p is not None else None,
                        "speculative_algorithm": "EAGLE3" if accept_p is not None else None,
                        "model_path": "/nonexistent/model",
                        "version": "0.5.16",
                        "internal_states": [
                            {"avg_spec_accept_length": 1.0 + 3 * accept_p} if accept_p is not None else {}
                        ],
                    }
                )
            self._reply({"detail": "Not Found"}, 404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path != "/generate":
                return self._reply({"detail": "Not Found"}, 404)
            seen["generate"] += 1
            if reply == "400":  # what a --skip-tokenizer-init server says to a text prompt
                return self._reply({"error": {"message": "text input needs a tokenizer"}}, 400)
            if reply == "garbage":
                self.send_response(200)
                self.send_header("Content-Length", "8")
                self.end_headers()
                return self.wfile.write(b"<html>hi")
            n = body["sampling_params"]["max_new_tokens"]
            ids = body.get("input_ids") or list(body.get("text", "x").encode())
            seen.setdefault("lengths", {}).setdefault(tuple(ids), []).append(n)  # what each prompt was asked for
            meta = {"completion_tokens": n}
            if accept_p is not None:
                rng, made, hist = random.Random(len(ids) * 1000 + ids[0]), 0, [0] * (N_DRAFT + 1)
                while made < n:
                    j = 0
                    while j < N_DRAFT and rng.random() < accept_p:
                        j += 1
                    hist[j] += 1
                    made += j + 1
                steps = sum(hist)
                meta.update(
                    spec_verify_ct=steps,
                    spec_num_correct_drafts=sum(j * c for j, c in enumerate(hist)),
                    spec_num_proposed_drafts=steps * N_DRAFT,
                    spec_accept_histogram=hist,
                    spec_accept_length=n / steps,
                )
            time.sleep(delay_s)
            self._reply({"output_ids": [(t + shift) % 97 for t in (ids * n)[:n]], "meta_info": meta})

    class Quiet(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):  # a client that timed out and left: expected here
            pass

    srv = Quiet(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()  # shutdown() waits one poll
    return srv, f"http://127.0.0.1:{srv.server_address[1]}", seen


@pytest.fixture
def servers():
    made = []

    def make(*a, **k):
        srv, url, seen = serve(*a, **k)
        made.append(srv)
        make.seen[url] = seen  # what that server was asked
        return url

    make.seen = {}
    yield make
    for s in made:
        s.shutdown()


def _run(tmp_path, *args):
    js = tmp_path / "r.json"
    rc = bench.main([*args, "--json", str(js), "--quiet", "--warmup", "0"])
    return rc, json.loads(js.read_text())


def test_draft_not_used_fails_with_causes(servers, capsys, tmp_path):
    rc, r = _run(tmp_path, "--url", servers(0.0), "--num-prompts", "4", "--max-new-tokens", "16")
    out = capsys.readouterr().out
    assert rc == 1 and r["status"] == "FAIL"
    assert "the draft is not being used: accept length 1.00" in out and "layers.0.*" in out


def test_position_acceptance_from_meta_info(servers, tmp_path):
    """P(draft token k accepted) from the summed histograms equals the fake's p**k within sampling error;
    accept length is completion tokens / verify steps, as SGLang defines it."""
    rc, r = _run(
        tmp_path, "--url", servers(0.7), "--num-prompts", "40", "--max-new-tokens", "200", "--concurrency", "4"
    )
    spec = r["levels"][0]["spec"]
    hist, steps = spec["accept_histogram"], sum(spec["accept_histogram"])
    assert rc == 0 and len(spec["position_acceptance"]) == N_DRAFT
    for k, p in enumerate(spec["position_acceptance"], 1):
        assert p == pytest.approx(sum(hist[k:]) / steps)
        assert p == pytest.approx(0.7**k, abs=0.04)
    assert spec["accept_length"] == pytest.approx(40 * 200 / spec["verify_ct"])
    assert spec["accept_rate"] == pytest.approx(sum(j * c for j, c in enumerate(hist)) / (steps * N_DRAFT))
    assert spec["server_avg_accept_length"] == pytest.approx(1 + 3 * 0.7)


def test_levels_speedup_report_and_identical_outputs(servers, capsys, tmp_path):
    spec, base = servers(0.8), servers(None, delay_s=0.05)
    report = tmp_path / "rep" / "bench.html"
    rc, r = _run(
        tmp_path,
        "--url",
        spec,
        "--baseline-url",
        base,
        "--num-prompts",
        "8",
        "--max-new-tokens",
        "20",
        "--concurrency",
        "1,4",
        "--report",
        str(report),
    )
    assert rc == 0 and r["status"] == "OK", r["verdict_lines"]
    assert [lv["concurrency"] for lv in r["levels"]] == [1, 4]
    for lv in r["levels"]:
        assert lv["greedy_mismatches"] == 0 and lv["speedup"] > 1
        assert lv["speedup"] == pytest.approx(lv["spec"]["tokens_per_s"] / lv["baseline"]["tokens_per_s"])
    out = capsys.readouterr().out
    assert "greedy outputs identical" in out and "draft token accepted (c=4)" in out
    doc = report.read_text()
    assert doc.count('src="data:image/png;base64,') == 2 and "EAGLE-3 acceptance benchmark" in doc
    for name in ("acceptance", "throughput"):
        png = report.with_name(f"bench_{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 2000


def test_request_lengths_drawn_from_a_range_alike_for_both_servers(servers, capsys, tmp_path):
    spec, base = servers(0.8), servers(None)
    rc, r = _run(
        tmp_path,
        "--url",
        spec,
        "--baseline-url",
        base,
        "--num-prompts",
        "12",
        "--max-new-tokens",
        "8:40",
        "--concurrency",
        "1,4",
    )
    assert rc == 0 and r["max_new_tokens"] == "8:40" and all(lv["greedy_mismatches"] == 0 for lv in r["levels"])
    asked = servers.seen[spec]["lengths"]
    assert asked == servers.seen[base]["lengths"] and len(asked) == 12  # same prompt, same length, on both servers
    assert all(len(set(ns)) == 1 and 8 <= ns[0] <= 40 for ns in asked.values())  # and at every level
    lengths = [ns[0] for ns in asked.values()]
    assert len(set(lengths)) > 3 and r["new_tokens_mean"] == pytest.approx(sum(lengths) / 12)
    assert r["levels"][0]["spec"]["output_tokens"] == sum(lengths)
    assert f"new tokens per request: 8:40 (mean {sum(lengths) / 12:.0f})" in capsys.readouterr().out
    for bad in ("40:8", "0", "8:", "x"):
        with pytest.raises(SystemExit) as e:
            bench.build_parser().parse_args(["--url", spec, "--max-new-tokens", bad])
        assert e.value.code == 2
    assert "LO:HI" in capsys.readouterr().err


def test_slower_than_baseline_warns(servers, capsys, tmp_path):
    spec, base = servers(0.8, delay_s=0.08), servers(None)
    args = ["--url", spec, "--baseline-url", base, "--num-prompts", "4", "--max-new-tokens", "8", "--concurrency", "2"]
    rc, r = _run(tmp_path, *args)
    out = capsys.readouterr().out
    assert rc == 0 and r["status"] == "WARNING" and r["ok"] is True
    assert "WARNING: speculation is slower than the baseline at concurrency 2" in out
    # the advice names the server's own settings, and leaves out CUDA graphs where they are on
    assert "--speculative-num-steps (now 3) / --speculative-num-draft-tokens (now 4)" in out
    assert "CUDA graphs are off" not in out
    assert r["levels"][0]["speedup"] < 1
    rc, r = _run(tmp_path, *args, "--fail-on-slower")
    assert rc == 1 and r["status"] == "FAIL"


def test_changed_greedy_outputs_fail(servers, capsys, tmp_path):
    rc, r = _run(
        tmp_path,
        "--url",
        servers(0.8),
        "--baseline-url",
        servers(None, shift=1),
        "--num-prompts",
        "3",
        "--concurrency",
        "1",
    )
    assert rc == 1 and r["levels"][0]["greedy_mismatches"] == 3
    assert "3/3 greedy outputs differ" in capsys.readouterr().out


def test_no_spec_stats(servers, capsys, tmp_path):
    rc, r = _run(tmp_path, "--url", servers(None), "--num-prompts", "2")
    assert rc == 1 and "no speculative statistics" in capsys.readouterr().out


def _silent_server():
    """Accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []
    stop = threading.Event()

    def loop():
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(s.accept()[0])
            except OSError:
                pass

    threading.Thread(target=loop, daemon=True).start()
    return s, stop, f"http://127.0.0.1:{s.getsockname()[1]}"


def test_silent_server_fails_in_bounded_time(capsys):
    from sglang_eagle3_ext.cli.common import run_tool

    s, stop, url = _silent_server()
    try:
        t = time.monotonic()
        rc = run_tool("bench", bench.main, ["--url", url, "--wait-for-server", "1.5", "--timeout", "1", "--quiet"])
        took = time.monotonic() - t
    finally:
        stop.set()
        s.close()
    err = capsys.readouterr().err
    # the silent server never answers; without the deadlines bench waits 300 s (its --timeout default): 30 s holds
    # the 2.5 s of deadlines at load 8 on 2 cores
    assert rc == 2 and took < 30, (rc, took)
    assert f"GET {url}/health: not healthy within 1.5 s" in err and "no complete answer" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err  # its one probe took the wait


def test_a_wait_says_so_in_one_line(capsys):
    """A server that comes up late: one line says bench waits for it, then the run goes on."""
    from trust_client_servers import Replies

    from sglang_eagle3_ext.server.http_client import Server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there yet
    late = {}
    threading.Timer(1.5, lambda: late.setdefault("srv", Replies({"/health": {}}, port=port))).start()
    try:
        took = Server(f"http://127.0.0.1:{port}").wait_healthy(60, poll_s=0.25)
    finally:
        threading.Event().wait(0.1)
        late["srv"].close()
    err = capsys.readouterr().err.strip().splitlines()
    # waited for the server (1.5 s), not to the end of the wait (60 s); 30 s holds at load 8 on 2 cores
    assert 1.4 < took < 30 and len(err) == 1 and err[0].startswith(f"waiting up to 60 s for http://127.0.0.1:{port}")


def test_generate_timeout_after_health(servers, capsys):
    from sglang_eagle3_ext.cli.common import run_tool

    url = servers(0.8, delay_s=60)  # answers after 60 s: the 0.5 s deadline ends the request long before
    t = time.monotonic()
    rc = run_tool(
        "bench",
        bench.main,
        ["--url", url, "--timeout", "0.5", "--quiet", "--num-prompts", "2", "--warmup", "0", "--concurrency", "1"],
    )
    err = capsys.readouterr().err
    assert rc == 2 and time.monotonic() - t < 30  # 30 s: the deadline at load 8 on 2 cores, well short of 60
    assert f"POST {url}/generate: no complete answer within 0.5 s" in err and "Traceback" not in err


def test_unreachable_server(capsys):
    from sglang_eagle3_ext.cli.common import run_tool

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    rc = run_tool("bench", bench.main, ["--url", f"http://127.0.0.1:{port}", "--wait-for-server", "1", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot connect" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "reply,words",
    [("400", 'HTTP 400: {"error": {"message": "text input needs a tokenizer'), ("garbage", "the reply is not JSON")],
)
def test_bad_server_reply_is_one_line(servers, capsys, reply, words):
    from sglang_eagle3_ext.cli.common import run_tool

    url = servers(0.8, reply=reply)
    rc = run_tool("bench", bench.main, ["--url", url, "--quiet", "--num-prompts", "2", "--concurrency", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"POST {url}/generate" in err and words in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def _level(c, speedup):
    return {"concurrency": c, "speedup": speedup}


def test_slower_fix_names_what_applies():
    args = {"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}
    fix = slower_fix(args, 16, [_level(1, 2.02), _level(4, 1.4), _level(16, 0.87)])
    assert "CUDA graphs are off" not in fix and "(now 3)" in fix and "it pays at concurrency 1 (2.02x)" in fix
    assert "--spec-log / --baseline-log" in fix  # without logs: how to tell iterations from admissions
    fix = slower_fix({**args, "disable_cuda_graph": True}, 1, [_level(1, 0.5)])
    assert fix.startswith("CUDA graphs are off on the EAGLE-3 server") and "it pays" not in fix
    assert "--spec-log" not in fix  # batch 1: no admission stalls another request
    assert "--speculative-num-steps" in slower_fix({}, 1, [_level(1, 0.5)])


def _with_steps(spec_steps, base_steps, accept=3.6):
    lv = {**_level(16, 0.8), "spec": {"accept_length": accept}, "steps": {"spec": spec_steps, "baseline": base_steps}}
    return [_level(1, 1.9), lv]


def test_slower_fix_from_the_logs_names_admissions_or_iterations():
    args = {"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}
    # a Kimi-width round trip: cheap iterations, costly admissions
    fix = slower_fix(
        args,
        16,
        _with_steps(
            {"iteration_ms": 7.6, "admission_ms": 47.5, "admission_share": 0.55, "prefill_batches": 42},
            {"iteration_ms": 3.6, "admission_ms": 3.9, "admission_share": 0.12, "prefill_batches": 14},
        ),
    )
    assert (
        "admissions: each of 42 prefill batches stalls the running batch 47.5 ms (target-only: 14 at 3.9 ms), "
        "55%" in fix
    )
    assert "(1.71x between admissions at accept length 3.60)" in fix and "--min-free-slots-delay" in fix
    assert "a cheaper draft" not in fix
    # iterations that cost more than they save, few admissions
    fix = slower_fix(
        args,
        16,
        _with_steps(
            {"iteration_ms": 16.0, "admission_ms": 5.0, "admission_share": 0.05},
            {"iteration_ms": 4.5, "admission_ms": 4.0},
        ),
    )
    assert (
        fix.startswith("it pays at concurrency 1")
        and "the iterations: one iteration at batch 16 costs 16.0 ms "
        "vs 4.5 ms a target-only step (1.01x between admissions"
        in fix
        and "(now 3)" in fix
    )
    assert "admissions:" not in fix


def test_bench_reads_the_server_logs_per_concurrency(tmp_path):
    from test_bench_steps import decode_line, prefill_line

    spec_log, base_log = tmp_path / "spec.log", tmp_path / "base.log"
    spec_log.write_text(
        "\n".join(
            [decode_line(16, 0.0076, 3.6)] * 4
            + [prefill_line(1), decode_line(16, 0.0556, 3.6)]
            + [decode_line(1, 0.006, 3.6)] * 3
        )
    )
    base_log.write_text("\n".join([decode_line(16, 0.0036)] * 4))
    levels = [{"concurrency": 1}, {"concurrency": 16}]
    add_step_costs(levels, str(spec_log), str(base_log))
    assert "steps" not in levels[0]  # batch 1: nothing admitted beside a running request
    assert levels[1]["steps"]["spec"]["iteration_ms"] == 7.6 and levels[1]["steps"]["spec"]["admission_ms"] == 48.0
    assert levels[1]["steps"]["baseline"]["iteration_ms"] == 3.6
    with pytest.raises(BadInput, match="--spec-log .*missing.log"):
        add_step_costs(levels, str(tmp_path / "missing.log"), None)


def _target_dir(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_slower_fix_names_the_mla_verify_backend_on_triton(tmp_path):
    """Triton verifies MLA with its extend kernel (a profile: 4.7 of 11.4 ms at batch 16); the tip
    names FA3 / FlashMLA where the target is MLA or unknown, never for a non-MLA target or another backend."""
    kimi = _target_dir(tmp_path, "kimi", {"model_type": "kimi_k25", "text_config": {"kv_lora_rank": 512}})
    llama = _target_dir(tmp_path, "llama", {"model_type": "llama", "num_key_value_heads": 8})
    lv = [_level(16, 0.8)]
    fix = slower_fix({"attention_backend": "triton", "model_path": kimi}, 16, lv)
    assert "Triton verifies MLA with its extend kernel" in fix and "--attention-backend fa3 or flashmla" in fix
    assert "if the target uses MLA" not in fix
    fix = slower_fix({"attention_backend": "triton", "model_path": "org/not-in-cache"}, 16, lv)
    assert fix.startswith("if the target uses MLA (DeepSeek-V3, Kimi-K2.5): Triton verifies")
    assert "flashmla" not in slower_fix({"attention_backend": "triton", "model_path": llama}, 16, lv)
    assert "flashmla" not in slower_fix({"attention_backend": "flashmla", "model_path": kimi}, 16, lv)
    assert target_is_mla(kimi) is True and target_is_mla(llama) is False
