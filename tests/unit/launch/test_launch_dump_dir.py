"""`sglang-eagle3 launch --dump-dir DIR`: the dump folder is checked (a folder, writable), made at launch, handed
to SGLang's processes as SGLANG_EAGLE3_EXT_DUMP_DIR, beats the preset's dump_dir (said once), and shows in the
--dry-run plan. In-process, real SGLang 0.5.16 for the argument parser; nothing is served."""

from __future__ import annotations

import os
import re
import string
from pathlib import Path

import pytest
from helpers import assert_names_its_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_launch_hardware import command, decision_rows, launch

from sglang_eagle3_ext import boundary
from sglang_eagle3_ext.launch import dump_dir, start
from sglang_eagle3_ext.launch.options import LaunchOptions
from sglang_eagle3_ext.launch.plan import build_plan

pytestmark = pytest.mark.sglang
VAR = "SGLANG_EAGLE3_EXT_DUMP_DIR"


def test_dump_dir_reaches_the_command_and_beats_the_preset_in_one_line(tmp_path):
    target = tmp_path / "data" / "dump"
    rc, out, err = launch(tmp_path, "--preset", "tiny-dump", "--dump-dir", str(target))
    assert rc == 0, err
    assert f"{VAR}={target}" in command(out)
    assert "./dumps" not in command(out) and str(tmp_path / "dumps") not in command(out)
    rows = decision_rows(out, VAR)
    assert len(rows) == 1, rows
    assert "--dump-dir" in rows[0] and "preset tiny-dump" in rows[0] and "./dumps" in rows[0]
    assert "would be created" in rows[0]
    assert not target.exists() and not (tmp_path / "data").exists()  # a dry run makes nothing
    assert "SGLANG_EAGLE3_EXT_DUMP_LAYERS=1,2,3" in command(out)  # the preset's other dump settings stay


def test_dump_dir_turns_dumping_on_without_a_dump_preset_and_is_made_absolute(tmp_path):
    (tmp_path / "d").mkdir()
    rc, out, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", "d")
    assert rc == 0, err
    assert f"{VAR}={tmp_path / 'd'}" in command(out)  # children may chdir: the path is absolute
    assert "exists" in decision_rows(out, VAR)[0]


def test_dump_dir_beats_the_environment_and_says_so(tmp_path):
    rc, out, _ = launch(
        tmp_path, "--preset", "tiny", "--dump-dir", str(tmp_path / "mine"), env={VAR: str(tmp_path / "old")}
    )
    assert rc == 0
    row = decision_rows(out, VAR)
    assert len(row) == 1 and str(tmp_path / "old") in row[0] and re.search(r"\bset\b", row[0])
    assert f"{VAR}={tmp_path / 'mine'}" in command(out)


@pytest.fixture
def no_server(monkeypatch):
    """A tripwire: a launch that got past its checks fails the test instead of starting SGLang here."""

    def started(plan, *checks):
        raise AssertionError(f"the launch went ahead: {plan.command}")

    monkeypatch.setattr(start, "launch", started)


@pytest.mark.parametrize("how", ["file", "under a file", "empty"])
def test_what_is_not_a_folder_is_refused_naming_it(tmp_path, how, no_server):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    given_path = {"file": str(f), "under a file": str(f / "sub"), "empty": ""}[how]
    for dry in (True, False):  # the same verdict with and without --dry-run, before anything starts
        rc, out, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", given_path, dry_run=dry)
        assert rc == 2, (how, dry, out, err)
        assert "--dump-dir" in err and "\n" not in err.strip() and "Traceback" not in err
        assert "SGLang command" not in out
    assert f.read_text() == "x"


def test_a_launch_plans_the_folder_then_makes_it_first(tmp_path):
    """Without --dry-run: the plan (what the launcher hands to SGLang's processes) names the folder, and making
    it is the launch's first step (nothing is made for a plan that fails a later check)."""
    target = tmp_path / "a" / "b" / "dump"
    ours = LaunchOptions(preset="tiny", dump_dir=str(target), skip_draft_check=True)
    plan = build_plan(ours, [], env={"SGLANG_EAGLE3_EXT_CACHE": str(tmp_path / "cache")})
    assert plan.env_updates[VAR] == str(target) and plan.dump_dir == str(target)
    assert "made at launch" in decision_rows(plan.render(), VAR)[0] and not (tmp_path / "a").exists()
    dump_dir.make(plan.dump_dir)
    assert target.is_dir()
    target.rmdir()
    target.parent.rmdir()
    target.parent.write_text("changed since the plan")  # a file where the folder's parent should be
    with pytest.raises(dump_dir.DumpDirRefused, match="is a file"):
        dump_dir.make(plan.dump_dir)


def test_preset_dump_dir_is_checked_too(tmp_path):
    """The preset's ./dumps goes through the same check: a file in its place stops the launch."""
    (tmp_path / "dumps").write_text("not a folder")
    rc, _, err = launch(tmp_path, "--preset", "tiny-dump")
    assert rc == 2 and str(tmp_path / "dumps") in err and "tiny-dump" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_parent_is_a_warning_in_the_plan_and_an_error_at_launch(tmp_path, no_server):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    rc, out, _ = launch(tmp_path, "--preset", "tiny", "--dump-dir", str(ro / "dump"))
    assert rc == 0 and re.search(r"\(dump dir\).*warn", out)
    rc, _, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", str(ro / "dump"), dry_run=False)
    assert rc == 2 and "not writable" in err


def test_a_folder_this_user_cannot_write_warns_in_a_dry_run_and_stops_a_launch(tmp_path, monkeypatch, no_server):
    """As the root test above, where tests run as root: the permission answer of the OS is what differs."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == ro else real_access(p, mode, **kw))
    rc, out, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", str(ro / "dump"))
    assert rc == 0, err
    warn = decision_rows(out, "(dump dir)")
    assert len(warn) == 1 and "warn" in warn[0] and f"{ro} is not writable" in warn[0]
    assert f"{VAR}={ro / 'dump'}" in command(out)  # the plan still shows what the launch would pass
    rc, _, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", str(ro / "dump"), dry_run=False)
    assert rc == 2 and "--dump-dir" in err and "not writable" in err and not (ro / "dump").exists()


def test_writable_dir_checks():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        assert boundary.writable_dir(base / "x" / "y", "dump dir") == base / "x" / "y"
        assert not (base / "x").exists()
        assert boundary.writable_dir(base / "x" / "y", "dump dir", make=True).is_dir()
        (base / "f").write_text("")
        for bad, says in ((base / "f", "is a file"), (base / "f" / "g", "is a file")):
            with pytest.raises(boundary.BadInput, match=says):
                boundary.writable_dir(bad, "dump dir", make=True)
        os.symlink(base / "missing", base / "link")
        with pytest.raises(boundary.BadInput, match="broken symlink"):
            boundary.writable_dir(base / "link", "dump dir")


_names = st.text(st.sampled_from(string.ascii_letters + string.digits + "._-~ /\\:\n\t\u00e9*?"), max_size=20)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_names, st.sampled_from(["tiny", "tiny-dump"]))
def test_any_dump_dir_text_exits_0_or_2_and_a_dry_run_writes_nothing(tmp_path, text, preset):
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    (work / "file").write_text("")
    before = sorted(str(p) for p in work.rglob("*"))
    rc, out, err = launch(work, "--preset", preset, "--skip-draft-check", "--dump-dir", text)
    assert rc in (0, 2), err
    assert "Traceback" not in err and "a bug" not in err
    assert sorted(str(p) for p in work.rglob("*")) == before
    if rc == 0:
        assert f"{VAR}=" in command(out)
    else:
        assert_names_its_input(err, "--dump-dir")
