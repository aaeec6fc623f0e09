"""`dump status` lists every writer: one whose status file cannot be read is listed as unreadable, naming the
file, and the report still comes (exit 0)."""

from __future__ import annotations

import json

import acceptance_world as W
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    d = tmp_path_factory.mktemp("status")
    target = W.write_target(d / "target")
    out = W.write_dump(d / "dump", W.sequences(4, seed=1), target, [4] * 4)
    (out / "status").mkdir(exist_ok=True)
    return out


def _status(dump, capsys):
    from sglang_eagle3_ext.cli.dump import main

    rc = main(["status", "--dump-dir", str(dump), "--json", "-"])
    return rc, capsys.readouterr()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.sampled_from(["{", "[]", '{"state": 3}', '{"stats": "x"}', "\x00\xff"]) | st.text(max_size=8))
def test_an_unreadable_writer_is_listed_as_such(dump, capsys, text):
    (dump / "status" / "good.json").write_text(json.dumps({"state": "running", "stats": {"written": 2}}))
    (dump / "status" / "bad.json").write_text(text)
    rc, said = _status(dump, capsys)
    assert rc == 0, said.err
    writers = json.loads(said.out)["writers"]
    assert writers["good"]["state"] == "running"
    if writers["bad"].get("state") == "unreadable":
        assert "bad.json" in writers["bad"]["error"]
