"""benchmarks/bench_serve.py and profile_spec.py end to end on a CPU: every server they start is a loopback
server speaking SGLang's /generate and /start_profile (the GPU parts, SGLang's servers, cannot run here), so
a GPU session does not spend its budget on a broken flag, key or ratio. Checked: which servers start with
which environment, and that the ratios and JSON the acceptance reads come out."""

from __future__ import annotations

import contextlib
import gzip
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("speculators")
pytest.importorskip("sglang")

REPO = Path(__file__).resolve().parents[3]


def _loopback(spec: bool):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _reply(self, out):
            data = out if isinstance(out, bytes) else json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain" if isinstance(out, bytes) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply({})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/generate":
                n = body["sampling_params"]["max_new_tokens"]
                return self._reply(
                    {
                        "output_ids": [(sum(body["input_ids"]) + i) % 97 for i in range(n)],
                        "meta_info": {"completion_tokens": n, "spec_verify_ct": -(-n // 3) if spec else 0},
                    }
                )
            if self.path == "/start_profile":  # SGLang writes the trace after the last profiled step
                out = Path(body["output_dir"])
                out.mkdir(parents=True, exist_ok=True)
                ev = [{"cat": "kernel", "name": f"k{i % 3}", "ts": i * 10, "dur": 5} for i in range(60)]
                name = "p-TP-0-EXTEND" if body.get("profile_by_stage") else "p-TP-0"  # SGLang's by-stage names

                def write():
                    time.sleep(0.5)
                    with gzip.open(out / f"{name}.trace.json.gz", "wt") as fh:
                        json.dump({"traceEvents": ev}, fh)

                threading.Thread(target=write).start()
                # as SGLang's http_server.start_profile_async (0.5.14, 0.5.16): plain text, not JSON
                return self._reply(b"Start profiling.\n")
            self._reply({})

    class Srv(ThreadingHTTPServer):
        request_queue_size = 128  # 16 requests in flight (socketserver's 5 resets connections; uvicorn: 2048)
        daemon_threads = True

    srv = Srv(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()  # shutdown() waits one poll
    return srv


@pytest.fixture
def benches(tmp_path, monkeypatch):
    """(bench_serve, profile_spec, started) with servers replaced by loopbacks; started: (name, args, env)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.syspath_prepend(str(REPO / "tests" / "gpu"))
    for m in ("bench_serve", "profile_spec", "gpu_helpers"):
        sys.modules.pop(m, None)
    import bench_serve
    import gpu_helpers
    import profile_spec

    started = []

    @contextlib.contextmanager
    def server(args, *, name, port, env=None, launcher=None, timeout=600):
        started.append((name, list(args), dict(env or {})))
        spec = "--speculative-draft-model-path" in args
        srv = _loopback(spec)
        if "--decode-log-interval" in args:  # the scheduler's log (SGLang's format): 16 in flight, 2 admissions
            from test_bench_steps import decode_line, prefill_line

            it, acc = (0.0075, 4.0) if spec else (0.0036, None)
            (tmp_path / f"{name}.log").write_text(
                "\n".join(
                    [decode_line(16, it, acc)] * 5 + [prefill_line(1), prefill_line(2), decode_line(16, it + 0.08, acc)]
                )
            )
        try:
            yield f"http://127.0.0.1:{srv.server_port}", tmp_path / f"{name}.log", None
        finally:
            srv.shutdown()

    monkeypatch.setattr(gpu_helpers, "sglang_server", server)
    monkeypatch.setattr(gpu_helpers, "defaults_refused", lambda *a, **k: None)  # resolves ServerArgs on a GPU
    monkeypatch.setenv("OUT", str(tmp_path))
    return bench_serve, profile_spec, started


@pytest.fixture(scope="module")
def target_and_draft(tmp_path_factory):
    from sglang_eagle3_ext.cli.convert import convert
    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    d = tmp_path_factory.mktemp("models")
    target = ensure_tiny_target(d / "target")
    draft = convert(
        make_speculators_draft(d / "spec", aux_ids=(2, 3, 4)), d / "draft", progress=False, log=lambda *a: None
    )
    return str(target), str(draft)


def test_bench_serve_runs_every_group_and_prints_the_ratios(benches, target_and_draft, tmp_path, monkeypatch, capsys):
    bench_serve, _, started = benches
    target, draft = target_and_draft
    monkeypatch.setattr(
        sys, "argv", ["bench_serve", "--model", target, "--draft", draft, "--rounds", "2", "--new-tokens", "4"]
    )
    bench_serve.main()
    names = [n for n, _, _ in started]
    assert names == [f"bench_serve_{n}" for n in ("spec_on", "spec_off", "spec_dump", "base_on", "base_off", "dump_on")]
    env = {n.removeprefix("bench_serve_"): e for n, _, e in started}
    assert env["spec_on"]["SGLANG_EAGLE3_EXT"] == "1" and env["spec_off"]["SGLANG_EAGLE3_EXT"] is None
    assert "SGLANG_EAGLE3_EXT_DUMP_DIR" in env["spec_dump"] and "SGLANG_EAGLE3_EXT_DUMP_DIR" in env["dump_on"]
    assert env["spec_dump"]["SGLANG_EAGLE3_EXT_DUMP_DIR"] != env["dump_on"]["SGLANG_EAGLE3_EXT_DUMP_DIR"]
    args = {n.removeprefix("bench_serve_"): a for n, a, _ in started}
    assert (
        "--speculative-draft-model-path" in args["spec_off"]
        and "--speculative-draft-model-path" not in args["base_off"]
    )
    assert args["spec_on"][args["spec_on"].index("--max-total-tokens") + 1] == "65536"
    res = json.loads((tmp_path / "bench_serve.json").read_text())
    assert set(res["ratios"]) == {
        f"{r} bs{b}"
        for r in ("spec_on/spec_off", "base_on/base_off", "dump_on/base_on", "spec_dump/spec_on")
        for b in (1, 16)
    }
    assert res["spec_bs16_greedy_identical"] is True and res["draft_eagle_config"]["hf_hidden_state_indices"] == [
        2,
        3,
        4,
    ]
    assert all(len(v) == 2 for v in res["rounds"].values())
    assert "spec_dump/spec_on bs16: " in capsys.readouterr().out


def test_profile_spec_profiles_each_setting_against_target_only(benches, target_and_draft, tmp_path, monkeypatch):
    _, profile_spec, started = benches
    target, draft = target_and_draft
    monkeypatch.setattr(profile_spec, "POLL_S", 0.2)  # the loopback writes its trace at once, not over seconds
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "profile_spec",
            "--model",
            target,
            "--draft",
            draft,
            "--new-tokens",
            "4",
            "--requests",
            "16",
            "--spec",
            "3,1,4",
            "--spec",
            "1,1,2",
            "--profile-steps",
            "3",
        ],
    )
    profile_spec.main()
    assert [n for n, _, _ in started] == ["profile_base", "profile_spec_3_1_4", "profile_spec_1_1_2"]
    spec_args = started[2][1]
    assert spec_args[spec_args.index("--speculative-num-draft-tokens") + 1] == "2"
    res = json.loads((tmp_path / "profile_spec_triton_bs16.json").read_text())
    s = res["servers"]["spec_1_1_2"]
    assert s["gpu_busy"] == pytest.approx(0.5, abs=0.01) and s["over_base"] > 0
    assert set(s["top_kernels_ms_per_step"]) == {"k0", "k1", "k2"}
    assert "--decode-log-interval" in spec_args  # every iteration logged, read back:
    assert s["steps"]["iteration_ms"] == 7.5 and s["steps"]["admission_ms"] == 40.0
    assert res["servers"]["base"]["steps"]["iteration_ms"] == 3.6
    assert s["admission_profile"]["gpu_busy"] == pytest.approx(0.5, abs=0.01)  # its own (by-stage) trace
