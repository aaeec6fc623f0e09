"""The refresh cursor is exact: a sample is used once its refresh's draft is served, by that draft, and only then —
across a swap the server refuses, a refresh killed between its steps, and a --draft other than the served one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import refresh_options
from hypothesis import given, settings
from hypothesis import strategies as st
from test_refresh import world  # noqa: F401 - the fixture: a target, a 40-sample serving dump, a draft

from sglang_eagle3_ext.boundary import Refused
from sglang_eagle3_ext.refresh import cursor as C

TESTS = Path(__file__).resolve().parents[2]


def _options(world, out: str, **kw):
    return refresh_options(world, out, **{"swap_timeout": 10, **kw})


def _refresh(world, out: str, **kw) -> dict:
    from sglang_eagle3_ext.refresh.run import refresh

    return refresh(_options(world, out, **kw))


class _Server:
    """A server with the package active serving `draft`; `accept` decides whether a swap request succeeds."""

    def __init__(self, draft, accept: bool):
        from loopback_server import FakeServer

        from sglang_eagle3_ext.draft.swap.protocol import PROTOCOL, STATE_KEY

        self.serving, self.accept = str(draft), accept

        def info():
            return {
                "version": "0.5.16",
                "internal_states": [{STATE_KEY: {"protocol": PROTOCOL, "draft": self.serving, "spec": {}}}],
            }

        def update(body):
            if not self.accept:
                return 200, {"success": False, "message": "refused by the server"}
            self.serving = body["model_path"]
            return 200, {"success": True, "message": "swapped", "num_paused_requests": 0}

        self.fake = FakeServer(info, update)
        self.url = self.fake.url

    def close(self):
        self.fake.close()


@pytest.fixture
def no_local_check(monkeypatch):
    """The swap client's own judging of the draft is the swap's business (its tests); here the server decides."""
    from sglang_eagle3_ext.draft.swap import client as swap_client

    monkeypatch.setattr(swap_client, "local_problems", lambda *a, **k: [])


def test_a_refused_swap_uses_no_sample(world, no_local_check):
    srv = _Server(world["draft"], accept=False)
    try:
        rep = _refresh(world, "r1", swap_url=srv.url)
    finally:
        srv.close()
    assert rep["accepted"] and rep["swap"]["ok"] is False and srv.serving == str(world["draft"])
    cur = C.read_cursor(world["dump"])
    assert cur.consumed == set() and cur.pending is None and cur.history[-1]["used"] is False
    again = _refresh(world, "r2", margin=1e9)  # every sample is still there for the next refresh
    assert again["selected"] == 40


def test_a_served_swap_records_the_samples_under_the_new_draft(world, no_local_check):
    srv = _Server(world["draft"], accept=True)
    try:
        rep = _refresh(world, "r1", swap_url=srv.url, draft=None)  # --draft: the served one
    finally:
        srv.close()
    assert rep["swap"]["ok"] and srv.serving == rep["draft_after"]
    cur = C.read_cursor(world["dump"])
    [used] = cur.used
    assert used["draft"] == rep["draft_after"] and len(used["trained"]) == rep["train_samples"]
    assert set(used["heldout"]) == cur.heldout and len(cur.heldout) == rep["heldout_samples"] > 0
    assert len(cur.consumed) == 40


def test_a_draft_other_than_the_served_one_is_refused_naming_both(world, capsys):
    from sglang_eagle3_ext.cli.refresh import main

    srv = _Server(world["tmp"] / "elsewhere", accept=True)
    out = world["tmp"] / "o"
    try:
        rc = main(
            [
                "--dump-dir",
                str(world["dump"]),
                "--draft",
                str(world["draft"]),
                "--out",
                str(out),
                "--swap",
                srv.url,
                "--quiet",
            ]
        )
    finally:
        srv.close()
    err = capsys.readouterr().err
    assert rc == 2 and str(world["draft"]) in err and str(world["tmp"] / "elsewhere") in err, err
    assert not out.exists() and not (world["dump"] / C.CURSOR_FILE).exists()


_KILLED = """
import json, os, signal, sys
from sglang_eagle3_ext import outdir
from sglang_eagle3_ext.refresh import run
from test_refresh_journal import _options

where, world = sys.argv[1], json.loads(sys.argv[2])
world = {k: __import__("pathlib").Path(v) for k, v in world.items()}
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if where == "after --out":          # --out is complete, nothing after it ran
    rename = outdir._swap      # train writes its own outputs the same way: only refresh's --out counts
    outdir._swap = lambda tmp, real, recheck: (rename(tmp, real, recheck), real.name == "r1" and die())
else:                               # while training: --out is not written
    run._train = die
run.refresh(_options(world, "r1"))
"""


@pytest.mark.parametrize("where, used", [("after --out", 40), ("while training", 0)])
def test_a_refresh_killed_between_steps_uses_its_samples_exactly_once(world, where, used):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), str(TESTS)])}
    arg = json.dumps({k: str(v) for k, v in world.items()})
    p = subprocess.run(
        [sys.executable, "-c", _KILLED, where, arg], env=env, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert (world["tmp"] / "r1" / "refresh.json").exists() == (where == "after --out")
    said = []
    nxt = _refresh(world, "r2", margin=1e9, say=said.append)
    assert nxt["selected"] == 40 - used  # the killed refresh's samples: used once, or not at all
    cur = C.read_cursor(world["dump"])
    assert cur.pending is None and len(cur.consumed) == used
    assert any("stopped before settling" in m for m in said), said
    if used:
        assert cur.used[0]["out"] == str(world["tmp"] / "r1")


# ---- the cursor file is outside input ---------------------------------------------------------------------
_ANY = st.none() | st.booleans() | st.integers() | st.text(max_size=4)
_IDS = st.lists(st.text(max_size=3), max_size=3) | _ANY
_SAMPLES = (
    st.fixed_dictionaries(
        {}, optional={"draft": _ANY, "out": _ANY, "trained": _IDS, "heldout": _IDS, "id": _ANY, "swap_url": _ANY}
    )
    | _ANY
)


@settings(max_examples=150, deadline=None)
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "format": st.just(C.FORMAT) | _ANY,
            "version": st.sampled_from([1, 2, 3]) | _ANY,
            "consumed": _IDS,
            "used": st.lists(_SAMPLES, max_size=2) | _ANY,
            "refreshes": st.just([]) | _ANY,
            "pending": _SAMPLES,
        },
    )
)
def test_any_cursor_reads_whole_or_is_refused_naming_it(tmp_path_factory, doc):
    d = tmp_path_factory.mktemp("cur")
    (d / C.CURSOR_FILE).write_text(json.dumps(doc))
    try:
        c = C.read_cursor(d)
    except Refused as e:
        assert C.CURSOR_FILE in str(e)
        return
    assert all(isinstance(x, str) for x in c.consumed)
    if c.pending is not None:
        assert isinstance(c.pending["out"], str)
        assert all(isinstance(x, str) for x in c.pending["trained"] + c.pending["heldout"])


def test_the_journal_round_trips(tmp_path):
    c = C.read_cursor(tmp_path)
    c.begin({"id": "x", "out": "/o", "draft": "/o/draft", "swap_url": None, "trained": ["a"], "heldout": ["b"]})
    assert C.read_cursor(tmp_path).pending["trained"] == ["a"] and C.read_cursor(tmp_path).consumed == set()
    c.finish({"accepted": True}, True)
    again = C.read_cursor(tmp_path)
    assert again.pending is None and again.consumed == {"a", "b"} and again.heldout == {"b"}
