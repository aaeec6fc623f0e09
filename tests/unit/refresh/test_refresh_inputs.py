"""`sglang-eagle3 refresh` reads and checks every new sample, --json and its output paths before it trains: a sample
that is no training sample (NaN/Inf, other shapes, unreadable) is named in one line, counted in the report and left
unused; a --json that cannot be written is refused before anything is read; the cursor records samples as used only
once the whole refresh succeeded, its report included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import acceptance_world as W
import pytest
from helpers import refresh_options
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file
from test_refresh import _serving_dump

from sglang_eagle3_ext.boundary import Refused
from sglang_eagle3_ext.dump.manifest import sample_relpath
from sglang_eagle3_ext.dump.sample_file import T_AUX
from sglang_eagle3_ext.refresh import cursor as C
from sglang_eagle3_ext.refresh.run import refresh
from sglang_eagle3_ext.refresh.traffic import BAD_SAMPLE, check_samples, select

N = 40
BAD = "s005"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("refresh_inputs")
    target = W.write_target(root / "target")
    return {"target": target, "dump": _serving_dump(root / "dump", target, n=N), "draft": W.write_draft(root / "draft")}


@pytest.fixture
def world(made, tmp_path):
    """A copy of the serving dump for one test (its samples and cursor change)."""
    return {**made, "dump": Path(shutil.copytree(made["dump"], tmp_path / "dump")), "tmp": tmp_path}


def _rewrite(dump: Path, sid: str, change) -> Path:
    """Sample `sid` written again with `change(tensors)` applied (its metadata kept)."""
    p = dump / sample_relpath(sid)
    with safe_open(str(p), "pt") as f:
        meta, t = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    change(t)
    save_file({k: v.contiguous() for k, v in t.items()}, str(p), metadata=meta)
    return p


def _nan(t):
    t[T_AUX][3, 1] = float("nan")


def _inf(t):
    t[T_AUX][0, 0] = float("inf")


def _narrow(t):
    t[T_AUX] = t[T_AUX][:, :-1].clone()


BREAK = {
    "nan": lambda d: _rewrite(d, BAD, _nan),
    "inf": lambda d: _rewrite(d, BAD, _inf),
    "other-shape": lambda d: _rewrite(d, BAD, _narrow),
    "unreadable": lambda d: (d / sample_relpath(BAD)).write_bytes(b"\x00" * 12),
    "truncated": lambda d: (d / sample_relpath(BAD)).write_bytes((d / sample_relpath(BAD)).read_bytes()[:-40]),
}


def _cli(world, *extra) -> int:
    from sglang_eagle3_ext.cli.common import run_tool
    from sglang_eagle3_ext.cli.refresh import main

    return run_tool(
        "refresh",
        main,
        [
            "--dump-dir",
            str(world["dump"]),
            "--draft",
            str(world["draft"]),
            "--target",
            str(world["target"]),
            "--out",
            str(world["tmp"] / "out"),
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--workers",
            "1",
            *extra,
        ],
    )


@pytest.mark.parametrize("kind", sorted(BREAK))
def test_a_bad_sample_is_named_and_counted_before_anything_trains(world, capsys, kind):
    """40 new samples, one bad, --min-samples 40: it is skipped before training, so 39 are too few and nothing
    trains (a refresh that trained first would stop in the export, or worse, on the bad sample)."""
    BREAK[kind](world["dump"])
    report = world["tmp"] / "rep.json"
    rc = _cli(world, "--min-samples", str(N), "--json", str(report))
    out, err = capsys.readouterr()
    assert rc == 1, err[-3000:]
    assert "Traceback" not in err and "a bug" not in err
    said = [x for x in err.splitlines() if "skipped, not training samples" in x]
    assert len(said) == 1 and BAD in said[0] and sample_relpath(BAD) in said[0], err
    rep = json.loads(report.read_text())
    assert rep["skipped"] == {BAD_SAMPLE: 1} and [b["id"] for b in rep["bad_samples"]] == [BAD]
    assert rep["selected"] == N - 1 and "--min-samples" in rep["reason"]
    assert "1 bad sample(s)" in out
    assert not (world["tmp"] / "out").exists() and not (world["dump"] / C.CURSOR_FILE).exists()


def test_a_json_report_that_cannot_be_written_is_refused_before_anything(world, capsys):
    (world["tmp"] / "a-file").write_text("")
    rc = _cli(world, "--min-samples", "8", "--json", str(world["tmp"] / "a-file" / "rep.json"))
    err = capsys.readouterr().err
    assert rc == 2 and "--json" in err and len(err.strip().splitlines()) == 1, err
    assert not (world["tmp"] / "out").exists() and not (world["dump"] / C.CURSOR_FILE).exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_to_a_sample_file_selects_it_or_names_it(world, data):
    """One sample file cut short or with bytes overwritten: it still reads as a sample and is selected, or it is
    left out and named with its file; the other samples are selected either way."""
    dump = world["dump"]
    p = dump / sample_relpath(BAD)
    whole = p.read_bytes()
    try:
        _damaged_one(dump, p, bytearray(whole), data)
    finally:
        p.write_bytes(whole)


def _damaged_one(dump: Path, p: Path, raw: bytearray, data) -> None:
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1), label="keep")]
    else:
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        patch = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
        raw[at : at + len(patch)] = patch
    p.write_bytes(bytes(raw))
    try:
        sel, bad = check_samples(dump, select(dump, set(), 0.25), workers=1)
    except Refused as e:  # the manifest or the dump's metadata: not touched here
        pytest.fail(f"refused the dump for one sample: {e}")
    assert len(sel.ids) + len(bad) == N and set(sel.train).isdisjoint(sel.heldout) and sel.heldout
    assert [b["id"] for b in bad] in ([], [BAD])
    assert all(sample_relpath(BAD) in b["problem"] for b in bad)
    assert sel.skipped == ({BAD_SAMPLE: 1} if bad else {})


def test_the_cursor_records_nothing_when_the_report_cannot_be_written(world):
    """A refresh that trains, converts and is accepted, whose report then fails: its samples stay unused (the
    bad sample among them was never trained on), the refusal says why."""
    BREAK["nan"](world["dump"])
    said: list[str] = []

    def report(rep):
        raise OSError(28, "No space left on device")

    with pytest.raises(Refused, match="report could not be written.*No space left"):
        refresh(refresh_options(world, "out", say=said.append, report=report))
    assert any(BAD in x and "NaN/Inf" in x for x in said), said
    cur = C.read_cursor(world["dump"])
    assert cur.consumed == set() and cur.pending is None
    assert cur.history[-1]["used"] is False and "report could not be written" in cur.history[-1]["reason"]
    written = json.loads((world["tmp"] / "out" / "refresh.json").read_text())
    assert written["accepted"] and written["skipped"] == {BAD_SAMPLE: 1} and written["selected"] == N - 1
