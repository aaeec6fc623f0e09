"""`sglang-eagle3 refresh`: the cursor (which samples earlier refreshes used), the selection of new traffic, the
command's refusals, and one refresh end to end on a small world (training continues from the served draft)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import acceptance_world as W
import pytest
from helpers import assert_names_its_input, refresh_options
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.boundary import Refused
from sglang_eagle3_ext.refresh import cursor as C
from sglang_eagle3_ext.refresh.traffic import select


def _serving_dump(d: Path, target: Path, n: int = 40, accept=None) -> Path:
    """A dump dir as a dump while serving EAGLE-3 leaves it: prompt + response samples whose manifest records
    carry the prompt length, the verify tokens and the request's accept length."""
    seqs = W.sequences(n, seed=3)
    W.write_dump(d, seqs, target, [4] * n)
    man = d / "manifests" / "dp0.jsonl"
    recs = [json.loads(x) for x in man.read_text().splitlines()]
    for i, r in enumerate(recs):
        r.update(
            prompt_len=4,
            verify_tokens=len(seqs[i]) - 4,
            t=1000.0 + i,
            accept_len=(accept[i] if accept else 1.0 + (i % 4)),
        )
    man.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "generated.jsonl").unlink()
    return d


@pytest.fixture
def world(tmp_path):
    target = W.write_target(tmp_path / "target")
    return {
        "target": target,
        "dump": _serving_dump(tmp_path / "dump", target),
        "draft": W.write_draft(tmp_path / "draft"),
        "tmp": tmp_path,
    }


# ---- the cursor ------------------------------------------------------------------------------------------
def test_cursor_records_only_accepted_samples(tmp_path):
    c = C.read_cursor(tmp_path)
    assert c.consumed == set() and c.history == []
    c.advance(["a", "b"], {"accepted": False, "reason": "not better"})
    assert C.read_cursor(tmp_path).consumed == set()
    c.advance(["a", "b"], {"accepted": True})
    again = C.read_cursor(tmp_path)
    assert again.consumed == {"a", "b"} and [h["accepted"] for h in again.history] == [False, True]


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"format": "x", "version": 1, "consumed": [], "refreshes": []}',
        json.dumps({"format": C.FORMAT, "version": 1, "consumed": [1], "refreshes": []}),
    ],
)
def test_a_broken_cursor_is_refused_naming_the_file(tmp_path, text):
    (tmp_path / C.CURSOR_FILE).write_text(text)
    with pytest.raises(Refused, match=f"{C.CURSOR_FILE}.*move it away"):
        C.read_cursor(tmp_path)


@settings(max_examples=100, deadline=None)
@given(
    doc=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda ch: (
            st.lists(ch, max_size=3)
            | st.dictionaries(st.sampled_from(["format", "version", "consumed", "refreshes", "x"]), ch, max_size=4)
        ),
        max_leaves=8,
    )
)
def test_any_cursor_file_reads_or_is_refused(tmp_path_factory, doc):
    d = tmp_path_factory.mktemp("cur")
    (d / C.CURSOR_FILE).write_text(json.dumps(doc))
    try:
        c = C.read_cursor(d)
    except Refused as e:
        assert_names_its_input(e, C.CURSOR_FILE)
        return
    assert all(isinstance(x, str) for x in c.consumed)


def test_one_refresh_at_a_time(tmp_path):
    inside = threading.Event()
    with C.exclusive(tmp_path):
        inside.set()
        with pytest.raises(Refused, match=f"pid {os.getpid()}"):
            with C.exclusive(tmp_path):
                pass
    with C.exclusive(tmp_path):  # released
        pass


# ---- the selection ---------------------------------------------------------------------------------------
def test_selection_skips_used_samples_and_splits_by_id(world):
    dump = world["dump"]
    first = select(dump, set(), 0.25)
    assert first.new == 40 and len(first.ids) == 40 and first.heldout and first.train
    assert not set(first.train) & set(first.heldout)
    assert select(dump, set(), 0.25).heldout == first.heldout  # the same split when run again
    used = set(first.ids[:10])
    second = select(dump, used, 0.25)
    assert second.new == 30 and not used & set(second.ids)
    assert set(second.heldout) <= set(first.heldout)  # a sample's side does not change


def test_selection_by_the_served_accept_length(world):
    sel = select(world["dump"], set(), 0.25, max_accept_len=2.5)  # accept lengths 1, 2, 3, 4, 1, ...
    assert len(sel.ids) == 20 and sel.skipped == {"accept length >= 2.5": 20}
    man = world["dump"] / "manifests" / "dp0.jsonl"
    recs = [json.loads(x) for x in man.read_text().splitlines()]
    for r in recs[:5]:
        del r["accept_len"]
    man.write_text("".join(json.dumps(r) + "\n" for r in recs))
    sel = select(world["dump"], set(), 0.25, max_accept_len=2.5)
    assert sel.skipped["no accept length recorded (not served with EAGLE-3)"] == 5


# ---- the command -----------------------------------------------------------------------------------------
def _cli(*argv) -> int:
    from sglang_eagle3_ext.cli.refresh import main

    return main(list(argv))


def test_not_a_dump_dir_is_refused(world, capsys):
    rc = _cli(
        "--dump-dir", str(world["tmp"]), "--draft", str(world["draft"]), "--out", str(world["tmp"] / "o"), "--quiet"
    )
    assert rc == 2 and "dump_meta.json" in capsys.readouterr().err


def test_too_few_samples_trains_nothing(world, capsys):
    out = world["tmp"] / "o"
    rc = _cli(
        "--dump-dir",
        str(world["dump"]),
        "--draft",
        str(world["draft"]),
        "--out",
        str(out),
        "--min-samples",
        "41",
        "--quiet",
    )
    said = capsys.readouterr().out
    assert rc == 1 and "40 selected sample(s) < --min-samples 41" in said
    assert not out.exists() and not (world["dump"] / C.CURSOR_FILE).exists()


def test_a_bad_draft_is_refused_before_anything_is_read(world, capsys):
    bad = world["tmp"] / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    rc = _cli("--dump-dir", str(world["dump"]), "--draft", str(bad), "--out", str(world["tmp"] / "o"), "--quiet")
    assert rc == 2 and "--draft" in capsys.readouterr().err


# ---- one refresh end to end ------------------------------------------------------------------------------
def _refresh(world, out: str, margin: float):
    from sglang_eagle3_ext.refresh.run import refresh

    return refresh(refresh_options(world, out, margin=margin))


def test_refresh_end_to_end_and_the_cursor_resumes(world):
    from sglang_eagle3_ext.draft.check import check_draft

    kept = _refresh(world, "r1", margin=1e9)  # no draft gains that much: the current one stays
    assert not kept["accepted"] and "the current draft stays" in kept["reason"]
    assert kept["before"]["predicted_accept_length"] is not None and kept["check"] == "passed"
    assert C.read_cursor(world["dump"]).consumed == set()  # its samples stay for the next refresh
    got = _refresh(world, "r2", margin=-1e9)
    assert got["accepted"] and got["selected"] == 40
    assert not check_draft(got["draft_after"], target=str(world["target"])).errors
    assert json.loads((Path(got["out"]) / "refresh.json").read_text())["accepted"]
    [used] = json.loads((world["dump"] / C.CURSOR_FILE).read_text())["used"]
    assert used["draft"] == got["draft_after"] and len(C.read_cursor(world["dump"]).consumed) == 40
    nothing = _refresh(world, "r3", margin=-1e9)  # nothing new since
    assert not nothing["accepted"] and nothing["selected"] == 0 and not (world["tmp"] / "r3").exists()


_ANY = st.none() | st.booleans() | st.integers(-5, 10) | st.floats(allow_nan=True) | st.text(max_size=3)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.tuples(_ANY, _ANY), min_size=40, max_size=40), limit=st.none() | st.floats(0.5, 5))
def test_any_recorded_accept_length_or_time_selects_or_skips(tmp_path_factory, values, limit):
    """The manifest's accept_len and t come from outside: any value is used, or the sample skipped and counted."""
    d = tmp_path_factory.mktemp("sel")
    target = W.write_target(d / "target")
    dump = _serving_dump(d / "dump", target)
    man = dump / "manifests" / "dp0.jsonl"
    recs = [json.loads(x) for x in man.read_text().splitlines()]
    for r, (acc, t) in zip(recs, values):
        r["accept_len"], r["t"] = acc, t
    man.write_text("".join(json.dumps(r) + "\n" for r in recs))
    try:
        sel = select(dump, set(), 0.25, max_accept_len=limit)
    except Refused as e:
        assert_names_its_input(e, man, dump)
        return
    assert len(sel.ids) + sum(sel.skipped.values()) == 40 and len(set(sel.ids)) == len(sel.ids)
    if limit is not None:  # only finite recorded accept lengths below the limit are selected
        by_id = {r["id"]: r["accept_len"] for r in recs}
        assert all(
            isinstance(by_id[i], (int, float)) and not isinstance(by_id[i], bool) and by_id[i] < limit for i in sel.ids
        )


def test_a_swap_target_that_cannot_answer_is_refused_before_training(world, capsys):
    out = world["tmp"] / "o"
    rc = _cli(
        "--dump-dir",
        str(world["dump"]),
        "--draft",
        str(world["draft"]),
        "--out",
        str(out),
        "--swap",
        "http://127.0.0.1:9",
        "--quiet",
    )
    err = capsys.readouterr().err
    assert rc == 2 and "127.0.0.1:9" in err and "Traceback" not in err, err
    assert not out.exists() and not (world["dump"] / C.CURSOR_FILE).exists()


@pytest.mark.parametrize(
    "info",
    [
        {"version": "0.5.16", "internal_states": [{"sglang_eagle3_ext_draft": {"protocol": 999}}]},
        {"internal_states": "not a list"},
    ],
)
def test_a_swap_whose_server_answers_badly_is_reported_not_raised(world, info):
    """After an accepted refresh the new draft is already in --out and the cursor advanced: a server that answers
    the swap with something unreadable makes the swap's report say so, it does not lose the refresh's report."""
    from loopback_server import FakeServer

    from sglang_eagle3_ext.refresh.run import RefreshOptions, _swap

    srv = FakeServer(lambda: info, lambda body: (200, {"success": True}))
    try:
        rep = _swap(
            RefreshOptions(
                dump_dir=str(world["dump"]),
                draft=str(world["draft"]),
                out=str(world["tmp"] / "o"),
                swap_url=srv.url,
                swap_timeout=5,
            ),
            str(world["draft"]),
            lambda m: None,
        )
    finally:
        srv.close()
    assert rep["ok"] is False and ("'protocol'" in rep["error"] or "internal_states" in rep["error"]), rep
    assert srv.posts == []  # nothing was sent
