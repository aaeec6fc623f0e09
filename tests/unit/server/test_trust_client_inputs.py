"""Outside input of the server clients, each of the wrong shape, ends in exit 2 with one line naming where
(route and key, file:line and key, the flag typed) — never exit 3, never a silent slice or a partial result;
local inputs are refused before any wait on a server."""

from __future__ import annotations

import json
import time

import pytest
from trust_client_servers import Replies, Trickle

from sglang_eagle3_ext.cli import bench
from sglang_eagle3_ext.cli import dump as client
from sglang_eagle3_ext.cli.common import run_tool

GOOD_GEN = {"output_ids": [1, 2], "meta_info": {"completion_tokens": 2, "spec_verify_ct": 1}}


@pytest.fixture
def replies():
    made = []

    def make(**routes):
        made.append(
            Replies(
                {
                    "/health": {},
                    "/get_server_info": {},
                    "/generate": GOOD_GEN,
                    **{"/" + k: v for k, v in routes.items()},
                }
            )
        )
        return made[-1]

    yield make
    for r in made:
        r.close()


def _line(capsys, rc, *words, code=2):
    err = capsys.readouterr().err
    assert rc == code and "Traceback" not in err, (rc, err)
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(errors) == 1, err
    for w in words:
        assert w in errors[0], err
    return errors[0]


def _bench(url, *extra):
    return run_tool(
        "bench",
        bench.main,
        ["--url", url, "--quiet", "--warmup", "0", "--concurrency", "1", "--num-prompts", "1", *extra],
    )


@pytest.mark.parametrize(
    "route,reply,words",
    [
        ("generate", {"output_ids": [1], "meta_info": []}, ["'meta_info': expected an object"]),
        ("generate", {"output_ids": 5}, ["'output_ids': expected a list, got int"]),
        ("generate", {"output_ids": [1, "x"]}, ["'output_ids'[1]: expected an integer"]),
        ("generate", {"meta_info": {}}, ["'output_ids': missing"]),
        (
            "generate",
            {"output_ids": [1], "meta_info": {"spec_verify_ct": "3"}},
            ["'spec_verify_ct': expected an integer"],
        ),
        (
            "generate",
            {"output_ids": [1], "meta_info": {"spec_accept_histogram": [1, None]}},
            ["'spec_accept_histogram'[1]"],
        ),
        ("generate", [1, 2], ["reply: expected an object (mapping), got list"]),
        ("get_server_info", [1, 2], ["/get_server_info reply: expected an object (mapping), got list"]),
        ("get_server_info", "text", ["/get_server_info reply: expected an object (mapping), got str"]),
        ("get_server_info", [], ["/get_server_info reply: expected an object (mapping), got list"]),
        (
            "get_server_info",
            {"speculative_num_draft_tokens": "4"},
            ["'speculative_num_draft_tokens': expected an integer"],
        ),
        ("get_server_info", {"speculative_num_draft_tokens": 10**9}, ["'speculative_num_draft_tokens': must be 1.."]),
        ("get_server_info", {"internal_states": "x"}, ["'internal_states': expected a list"]),
        ("get_server_info", {"internal_states": [5]}, ["'internal_states'[0]: expected an object"]),
        ("get_server_info", {"server_args": [1]}, ["'server_args': expected an object"]),
        ("generate", b"{not json", ["the reply is not JSON"]),
    ],
)
def test_bench_names_the_route_and_key_of_a_malformed_reply(replies, capsys, route, reply, words):
    srv = replies(**{route: reply})
    _line(capsys, _bench(srv.url), f"{srv.url}/{route}", *words)


@pytest.mark.parametrize(
    "route,reply,words",
    [
        ("generate", {"output_ids": 5}, ["'output_ids': expected a list"]),
        ("generate", {"text": "hi"}, ["no output_ids, only text"]),
        ("get_server_info", [1], ["/get_server_info reply: expected an object"]),
        ("get_server_info", "", ["/get_server_info reply: expected an object"]),
        ("get_server_info", {"skip_tokenizer_init": "yes"}, ["'skip_tokenizer_init': expected true/false"]),
    ],
)
def test_dump_run_names_the_route_and_key_of_a_malformed_reply(replies, tmp_path, capsys, route, reply, words):
    srv = replies(**{route: reply})
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "input_ids": [1, 2]}) + "\n")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_meta.json").write_text("{}")
    rc = run_tool(
        "dump",
        client.main,
        [
            "run",
            "--url",
            srv.url,
            "--data",
            str(data),
            "--dump-dir",
            str(dump),
            "--generate",
            "--quiet",
            "--wait-s",
            "0",
        ],
    )
    _line(capsys, rc, f"{srv.url}/{route}", *words)


def _dump(tmp_path, manifest: str | None = None, status: dict | None = None):
    d = tmp_path / "dump"
    (d / "manifests").mkdir(parents=True)
    (d / "status").mkdir()
    (d / "dump_meta.json").write_text("{}")
    if manifest is not None:
        (d / "manifests" / "dp0.jsonl").write_text(manifest)
    for name, obj in (status or {}).items():
        (d / "status" / f"{name}.json").write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return d


REC = {"id": "a", "file": "samples/a.safetensors", "num_tokens": 3, "bytes": 10}


@pytest.mark.parametrize(
    "line,words",
    [
        ({**REC, "bytes": None}, [":2: 'bytes': expected an integer, got NoneType"]),
        ({**REC, "num_tokens": "3"}, [":2: 'num_tokens': expected an integer"]),
        ({**REC, "num_tokens": -1}, [":2: 'num_tokens': must be >= 0"]),
        ({**REC, "id": 5}, [":2: 'id': expected a string"]),
        ({"id": "b"}, [":2: 'file': missing"]),
        ([1, 2], [":2 (manifest line): expected an object"]),
    ],
)
def test_dump_status_names_file_line_and_key_of_a_bad_manifest_line(tmp_path, capsys, line, words):
    d = _dump(tmp_path, json.dumps({**REC, "id": "z"}) + "\n" + json.dumps(line) + "\n")
    rc = run_tool("dump", client.main, ["status", "--dump-dir", str(d)])
    _line(capsys, rc, str(d / "manifests" / "dp0.jsonl"), *words)


def test_a_torn_last_manifest_line_is_not_a_sample(tmp_path, capsys):
    d = _dump(tmp_path, json.dumps(REC) + "\n" + json.dumps({**REC, "id": "b"})[:25])
    assert run_tool("dump", client.main, ["status", "--dump-dir", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete_samples"] == 1


@pytest.mark.parametrize(
    "status,words",
    [
        ({"state": 5}, ["'state': expected a string"]),
        ([1], ["expected an object"]),
        ({"state": "dumping", "stats": [1]}, ["'stats': expected an object"]),
        ("{torn", ["not valid JSON"]),
    ],
)
def test_dump_status_names_a_bad_status_file(tmp_path, capsys, status, words):
    """The writer is listed as unreadable, naming the file and what is wrong; the report still comes (exit 0)."""
    d = _dump(tmp_path, status={"dp0": status})
    rc = run_tool("dump", client.main, ["status", "--dump-dir", str(d), "--json"])
    dp0 = json.loads(capsys.readouterr().out)["writers"]["dp0"]
    assert rc == 0 and dp0["state"] == "unreadable"
    assert all(w in dp0["error"] for w in [str(d / "status" / "dp0.json"), *words]), dp0["error"]


def test_dump_status_sums_the_writers_skip_counters(tmp_path, capsys):
    st = {
        "dp0": {"state": "dumping", "stats": {"written": 4, "skipped_multimodal": 2}},
        "dp1": {"state": "dumping", "stats": {"written": 1, "skipped_multimodal": 3}},
    }
    assert run_tool("dump", client.main, ["status", "--dump-dir", str(_dump(tmp_path, "", st)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped_multimodal"] == 5 and out["writers"]["dp1"]["stats"]["skipped_multimodal"] == 3
    d = tmp_path / "older"
    d.mkdir()
    assert (
        run_tool("dump", client.main, ["status", "--dump-dir", str(_dump(d, "", {"dp0": {"state": "x"}})), "--json"])
        == 0
    )
    assert "skipped_multimodal" not in json.loads(capsys.readouterr().out)  # a writer without the counter


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["bench", "--url", "http://127.0.0.1:9", "--num-prompts", "-1"], "--num-prompts"),
        (["bench", "--url", "http://127.0.0.1:9", "--num-prompts", "0"], "--num-prompts"),
        (["bench", "--url", "http://127.0.0.1:9", "--warmup", "-1"], "--warmup"),
        (["bench", "--url", "http://127.0.0.1:9", "--timeout", "0"], "--timeout"),
        (["bench", "--url", "http://127.0.0.1:9", "--timeout", "nan"], "--timeout"),
        (["bench", "--url", "http://127.0.0.1:9", "--wait-for-server", "-5"], "--wait-for-server"),
        (["bench", "--url", "http://127.0.0.1:9", "--vocab-size", "0"], "--vocab-size"),
        (["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1,100000"], "--concurrency"),
        (["dump", "run", "--data", "x", "--dump-dir", "y", "--limit", "-1"], "--limit"),
        (["dump", "run", "--data", "x", "--dump-dir", "y", "--concurrency", "0"], "--concurrency"),
        (["dump", "run", "--data", "x", "--dump-dir", "y", "--max-new-tokens", "-3"], "--max-new-tokens"),
        (["dump", "run", "--data", "x", "--dump-dir", "y", "--wait-s", "-1"], "--wait-s"),
        (["dump", "export", "--dump-dir", "y", "--to", "specforge", "--out", "o", "--workers", "0"], "--workers"),
    ],
)
def test_counts_out_of_range_are_refused_naming_the_flag(capsys, argv, flag, tmp_path, monkeypatch):
    from sglang_eagle3_ext import cli

    monkeypatch.chdir(tmp_path)  # the paths named are of the kinds the parser checks: the file x, the folder y
    (tmp_path / "x").write_text("")
    (tmp_path / "y").mkdir()
    rc = cli.main(argv)
    _line(capsys, rc, f"argument {flag}:")


def test_local_inputs_are_checked_before_any_wait_on_a_server(tmp_path, capsys):
    srv = Trickle(every_s=0.5)  # would hold every wait to its end
    try:
        t = time.monotonic()
        rc = _bench(srv.url, "--prompts", str(tmp_path / "missing.jsonl"), "--wait-for-server", "30")
        _line(capsys, rc, "--prompts", "missing.jsonl")
        rc = _bench(srv.url, "--spec-log", str(tmp_path / "none.log"), "--wait-for-server", "30")
        _line(capsys, rc, "--spec-log", "none.log")
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"id": "a", "input_ids": "12"}\n')
        (tmp_path / "dump").mkdir()
        (tmp_path / "dump" / "dump_meta.json").write_text("{}")
        rc = run_tool(
            "dump",
            client.main,
            ["run", "--url", srv.url, "--data", str(bad), "--dump-dir", str(tmp_path / "dump"), "--timeout", "30"],
        )
        _line(capsys, rc, "--data", "no sample to send")
        # any wait on the server would take 30 s; 25 s for the three refusals holds at load 8 on 2 cores
        assert time.monotonic() - t < 25
    finally:
        srv.close()


def test_dump_run_exits_1_when_lines_were_skipped(replies, tmp_path, capsys, caplog):
    srv = replies()
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "input_ids": [1]}) + "\n" + '{"id": "b", "input_ids": [true]}\n')
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_meta.json").write_text("{}")
    from sglang_eagle3_ext.dump.manifest import ManifestWriter

    ManifestWriter(dump, "dp0").append({**REC, "id": "a"})  # "a" is written already
    rc = run_tool(
        "dump",
        client.main,
        ["run", "--url", srv.url, "--data", str(data), "--dump-dir", str(dump), "--quiet", "--wait-s", "0", "--json"],
    )
    assert rc == 1 and json.loads(capsys.readouterr().out)["malformed_lines"] == 1
    assert f"{data}:2: 'input_ids'[0]: expected an integer" in caplog.text
