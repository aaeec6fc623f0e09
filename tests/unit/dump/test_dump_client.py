"""The dump client's input handling and its loud failures (a stdlib HTTP server stands in for SGLang)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from sglang_eagle3_ext.cli.dump import main
from sglang_eagle3_ext.dump.client_files import read_samples


def test_malformed_lines_skipped(tmp_path, caplog):
    p = tmp_path / "d.jsonl"
    p.write_text(
        "\n".join(
            [
                json.dumps({"id": "a", "input_ids": [1, 2]}),
                "{not json",
                json.dumps([1, 2]),
                json.dumps({"id": "b", "input_ids": []}),
                json.dumps({"id": "c", "text": "hi", "input_ids": [1]}),
                json.dumps({"id": "a", "input_ids": [3]}),
                json.dumps({"id": "../x", "text": "ok"}),
                "",
            ]
        )
    )
    samples, bad, dups = read_samples(p)
    assert [s["id"] for s in samples][0] == "a" and len(samples) == 2 and bad == 4 and dups == 1
    assert "/" not in samples[1]["id"]
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("skipped " in m for m in msgs) == 5
    assert any(f"{p}:3 (" in m or f"{p}:3:" in m for m in msgs)  # each skipped line named by file:line


class _Server:
    def __init__(self, info):
        self.requests = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, obj):
                b = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def do_GET(self):
                self._send(info)

            def do_POST(self):
                outer.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self._send({"output_ids": [7]})

        self.httpd = HTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()  # shutdown() waits a poll
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"


def test_client_fails_loudly(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "text": "hello"}) + "\n")
    srv = _Server({"skip_tokenizer_init": True})
    dump = tmp_path / "dump"
    dump.mkdir()
    assert main(["run", "--url", srv.url, "--data", str(data), "--dump-dir", str(dump)]) == 2
    assert "not dumping" in capsys.readouterr().err  # no dump_meta.json: server not dumping
    (dump / "dump_meta.json").write_text("{}")
    assert main(["run", "--url", srv.url, "--data", str(data), "--dump-dir", str(dump)]) == 2
    assert "pass --target DIR" in capsys.readouterr().err  # text needs the user's tokenizer
    (dump / "status").mkdir()
    (dump / "status" / "dp0.json").write_text(json.dumps({"state": "discarding"}))
    assert main(["run", "--url", srv.url, "--data", str(data), "--dump-dir", str(dump)]) == 2
    assert "SGLANG_EAGLE3_EXT_DUMP_DISCARD=1" in capsys.readouterr().err  # a benchmarking server writes nothing
    assert srv.requests == []


def test_client_resume_and_generate_mode(tmp_path):
    from sglang_eagle3_ext.dump.manifest import ManifestWriter

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": i, "input_ids": [1, 2, 3]}) + "\n" for i in ("a", "b")))
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_meta.json").write_text("{}")
    ManifestWriter(dump, "dp0").append({"id": "a", "file": "x", "num_tokens": 3, "bytes": 1})
    srv = _Server({"skip_tokenizer_init": True})
    rc = main(
        [
            "run",
            "--url",
            srv.url,
            "--data",
            str(data),
            "--dump-dir",
            str(dump),
            "--generate",
            "--wait-s",
            "0.5",
            "--quiet",
        ]
    )
    assert rc == 1  # "b" was sent but no server wrote it
    rids = [r["rid"] for r in srv.requests]
    assert len(rids) == 2 and rids[0].startswith("nodump-b-") and rids[1] == "b"  # "a" resumed (skipped)
    assert srv.requests[1]["input_ids"] == [1, 2, 3, 7]  # prompt + generated response
    from sglang_eagle3_ext.dump.client_files import generated_loss_masks

    # the generated tokens are recorded: exports train on the response only
    assert generated_loss_masks(dump) == {"b": [0, 0, 0, 1]}


def test_export_uses_generated_masks(tmp_path):
    """End to end through the exporter: a --generate sample's loss mask is 0 on the prompt, 1 on the response."""
    import torch

    from sglang_eagle3_ext.dump.client_files import generated_loss_masks
    from sglang_eagle3_ext.dump.exporters.speculators import export_speculators
    from sglang_eagle3_ext.dump.manifest import ManifestWriter
    from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_PRE, write_sample

    dump = tmp_path / "dump"
    (dump / "samples").mkdir(parents=True)
    (dump / "dump_meta.json").write_text(
        json.dumps({"layer_indices_hf": [1, 2, 3], "hidden_size": 4, "final": "prenorm"})
    )
    L = 5
    f = dump / "samples" / "g.safetensors"
    write_sample(f, {T_IDS: torch.arange(L), T_AUX: torch.randn(L, 12), T_PRE: torch.randn(L, 4)}, {"num_tokens": L})
    ManifestWriter(dump, "dp0").append({"id": "g", "file": "samples/g.safetensors", "num_tokens": L, "bytes": 1})
    (dump / "generated.jsonl").write_text(json.dumps({"id": "g", "prompt_len": 2, "len": L}) + "\n{torn")
    assert export_speculators(dump, tmp_path / "out", loss_masks=generated_loss_masks(dump)) == 1
    import datasets

    ds = datasets.load_from_disk(str(tmp_path / "out"))
    assert ds[0]["loss_mask"].tolist() == [0, 0, 1, 1, 1]
