"""The acceptance benchmark's arithmetic and verdicts, against a loopback server speaking SGLang's /generate schema."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglang_eagle3_ext import bench


def serve(tokens_per_verify: float | None, shift: int = 0):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/generate":
                n = body["sampling_params"]["max_new_tokens"]
                meta = {"completion_tokens": n}
                if tokens_per_verify:
                    meta["spec_verify_ct"] = int(round(n / tokens_per_verify))
                    meta["spec_accept_rate"] = (tokens_per_verify - 1) / 3
                out = {"output_ids": [(t + shift) % 97 for t in body["input_ids"][:n]], "meta_info": meta}
            elif self.path == "/get_server_info":
                out = {"internal_states": [{"avg_spec_accept_length": tokens_per_verify}]}
            else:
                self.send_response(404); self.end_headers(); return
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST  # /get_server_info is a GET in SGLang

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def servers():
    made = []

    def make(*a, **k):
        srv, url = serve(*a, **k)
        made.append(srv)
        return url

    yield make
    for s in made:
        s.shutdown()


def test_draft_not_used_fails_with_causes(servers, capsys):
    url = servers(1.0)
    assert bench.main(["--url", url, "--num-prompts", "4", "--max-new-tokens", "16"]) == 1
    out = capsys.readouterr().out
    assert "the draft is not being used: accept length 1.00" in out and "layers.0.*" in out


def test_working_draft_passes_and_reports(servers, capsys, tmp_path):
    url, base = servers(2.5), servers(None)
    js = tmp_path / "r.json"
    assert bench.main(["--url", url, "--baseline-url", base, "--num-prompts", "6", "--max-new-tokens", "20",
                       "--json", str(js)]) == 0
    r = json.loads(js.read_text())
    assert r["spec"]["accept_length"] == pytest.approx(20 / 8)  # 20 tokens, round(20/2.5)=8 verify steps
    assert r["spec"]["server_avg_accept_length"] == 2.5 and r["ok"] is True
    assert "greedy outputs identical" in capsys.readouterr().out


def test_changed_greedy_outputs_fail(servers, capsys):
    url, base = servers(2.5), servers(None, shift=1)
    assert bench.main(["--url", url, "--baseline-url", base, "--num-prompts", "3"]) == 1
    assert "greedy outputs differ" in capsys.readouterr().out


def test_no_spec_stats(servers, capsys):
    assert bench.main(["--url", servers(None), "--num-prompts", "2"]) == 1
    assert "no speculative statistics" in capsys.readouterr().out


def test_bad_prompt_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"input_ids": [1,2]}\nnot json\n')
    with pytest.raises(SystemExit, match="p.jsonl:2: not JSON"):
        bench.load_prompts(str(p))
