"""Whole-request deadlines: a server that trickles its reply a byte at a time (each read answered well within
the socket timeout) ends `bench` and `dump run` within --timeout / --wait-for-server, exit 2 naming the URL
and the deadline; a status file or manifest that is a FIFO ends `dump status` with exit 2, never blocks it."""

from __future__ import annotations

import json
import os

import pytest
from trust_client_servers import Trickle, in_thread

from sglang_eagle3_ext.cli import bench
from sglang_eagle3_ext.cli import dump as client
from sglang_eagle3_ext.cli.common import run_tool

# The trickle never ends and a FIFO never gives end of file, so without a deadline each call below waits forever
# (in_thread gives up at LIMIT_S); the bounds are generous enough to hold at load 8 on 2 cores.
LIMIT_S, BOUND_S = 60, 30


@pytest.fixture
def trickle():
    made = []

    def make(**kw):
        made.append(Trickle(**kw))
        return made[-1]

    yield make
    for t in made:
        t.close()


def _one_error(capsys, rc, *words):
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err, err
    line = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(line) == 1, err
    for w in words:
        assert w in line[0], err
    return line[0]


def test_health_wait_is_a_deadline_for_the_whole_wait(trickle, capsys):
    srv = trickle(every_s=0.2)
    rc, took = in_thread(
        run_tool, "bench", bench.main, ["--url", srv.url, "--wait-for-server", "1.5", "--quiet"], limit_s=LIMIT_S
    )
    assert rc is not None and took < BOUND_S, f"bench still waiting after {took:.1f} s (--wait-for-server 1.5)"
    _one_error(capsys, rc, f"GET {srv.url}/health", "1.5 s", "--wait-for-server")


def test_generate_timeout_is_a_deadline_for_the_whole_reply(trickle, capsys):
    srv = trickle(every_s=0.2, healthy=("/health",))
    rc, took = in_thread(
        run_tool,
        "bench",
        bench.main,
        ["--url", srv.url, "--timeout", "1.5", "--quiet", "--num-prompts", "1", "--warmup", "0", "--concurrency", "1"],
        limit_s=LIMIT_S,
    )
    assert rc is not None and took < BOUND_S, f"bench still waiting after {took:.1f} s (--timeout 1.5)"
    _one_error(capsys, rc, srv.url, "within 1.5 s", "--timeout")


def test_dump_run_timeout_is_a_deadline(trickle, tmp_path, capsys):
    srv = trickle(every_s=0.2)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "input_ids": [1, 2]}) + "\n")
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "dump_meta.json").write_text("{}")
    argv = [
        "run",
        "--url",
        srv.url,
        "--data",
        str(data),
        "--dump-dir",
        str(tmp_path / "dump"),
        "--timeout",
        "1.5",
        "--quiet",
        "--wait-s",
        "0",
    ]
    rc, took = in_thread(run_tool, "dump", client.main, argv, limit_s=LIMIT_S)
    assert rc is not None and took < BOUND_S, f"dump run still waiting after {took:.1f} s (--timeout 1.5)"
    _one_error(capsys, rc, srv.url, "within 1.5 s")


def _dump_dir(tmp_path):
    d = tmp_path / "dump"
    (d / "status").mkdir(parents=True)
    (d / "manifests").mkdir()
    (d / "dump_meta.json").write_text("{}")
    return d


def _unblock(fifo):
    """Give a reader blocked on the FIFO its end of file (a hung reader of the old code)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


@pytest.mark.parametrize("where", ["status/dp0.json", "manifests/dp0.jsonl"])
def test_dump_status_refuses_a_fifo(tmp_path, capsys, where):
    d = _dump_dir(tmp_path)
    fifo = d / where
    os.mkfifo(fifo)
    try:
        rc, took = in_thread(run_tool, "dump", client.main, ["status", "--dump-dir", str(d)], limit_s=LIMIT_S)
    finally:
        _unblock(fifo)
    assert rc is not None, "dump status blocked on a FIFO"
    if where.startswith("status/"):  # one writer's status: listed as unreadable, the report still comes
        out = capsys.readouterr()
        assert rc == 0 and str(fifo) in out.out + out.err and "FIFO" in out.out + out.err, out
    else:
        _one_error(capsys, rc, str(fifo), "FIFO")


@pytest.mark.parametrize("tool", ["bench", "dump"])
def test_a_fifo_for_prompts_or_data_is_refused(tmp_path, capsys, tool):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    d = _dump_dir(tmp_path)
    if tool == "bench":
        main, argv = bench.main, ["--url", "http://127.0.0.1:9", "--prompts", str(fifo), "--wait-for-server", "0"]
    else:
        main, argv = client.main, ["run", "--url", "http://127.0.0.1:9", "--data", str(fifo), "--dump-dir", str(d)]
    try:
        rc, took = in_thread(run_tool, tool, main, argv, limit_s=LIMIT_S)
    finally:
        _unblock(fifo)
    assert rc is not None, f"{tool} blocked on a FIFO"
    _one_error(capsys, rc, str(fifo), "FIFO")
