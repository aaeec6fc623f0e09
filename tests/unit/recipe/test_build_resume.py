"""`build` re-run: a finished stage is reused only for the inputs and settings it was made from, the report
certifies the draft files on disk at the end, one build per --out (its lock), and a lost or garbled marker is
redone. The stages' own work is replaced by small functions writing the same folders (the real stages run in
test_build.py); the order, markers, fingerprints, lock and report are build's own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.cli import build as build_cli
from sglang_eagle3_ext.cli.common import run_tool
from sglang_eagle3_ext.json_file import write_json
from sglang_eagle3_ext.recipe import STAGES, state
from sglang_eagle3_ext.recipe import run as run_mod
from sglang_eagle3_ext.recipe import stages as stages_mod

TARGET_CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4}


class Stages:
    """Stand-ins for the stages' work: each writes the folder its stage writes and notes that it ran."""

    def __init__(self):
        self.ran: list[str] = []
        self.resumed_train: list[bool] = []
        self.after: dict = {}  # stage -> fn(run), called once the stage's work is done

    def fn(self, name):
        def stage(run):
            self.ran.append(name)
            if name == "dump":
                write_dump(run.out / "dump", samples=3)
            elif name == "export":
                (run.out / "export").mkdir(exist_ok=True)
            elif name == "train":
                self.resumed_train.append("train" not in run.redo)
            elif name == "convert":
                (run.out / "draft").mkdir(exist_ok=True)
                (run.out / "draft" / "config.json").write_text(json.dumps({"lr": run.o.train.get("lr")}))
                (run.out / "draft" / "model.safetensors").write_bytes(b"\x01" * 4096)
            res = stages_mod.report(run) if name == "report" else {"ok": True}
            if name in self.after:
                self.after[name](run)
            return res

        return stage


def write_dump(d: Path, samples: int) -> None:
    (d / "manifests").mkdir(parents=True, exist_ok=True)
    (d / "dump_meta.json").write_text("{}")
    lines = [{"id": f"s{i}", "file": f"s{i}.safetensors", "num_tokens": 10, "bytes": 100} for i in range(samples)]
    (d / "manifests" / "w0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


class Hang(BaseException):
    """Raised by the alarm: no handler of the command line catches it."""


@pytest.fixture(autouse=True)
def deadline():
    """A build that blocks (a FIFO opened for reading) fails its test instead of stopping the suite."""

    def alarm(signum, frame):
        raise Hang("still running after 60 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def fake(monkeypatch):
    s = Stages()
    for name in STAGES:
        monkeypatch.setitem(run_mod.FUNCTIONS, name, s.fn(name))
    return s


@pytest.fixture
def world(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET_CONFIG))
    (tmp_path / "prompts.jsonl").write_text('{"id": "a", "input_ids": [1, 2, 3]}\n')
    return tmp_path


def build(world, *extra, data=True) -> int:
    argv = ["--target", world / "target", "--out", world / "out", "--quiet"]
    argv += ["--data", world / "prompts.jsonl", "--url", "http://127.0.0.1:9"] if data else []
    return run_tool("build", build_cli.main, [str(a) for a in [*argv, *extra]])


def lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_other_settings_are_refused_naming_the_first_stage_they_shape_and_the_config_is_kept(world, fake, capsys):
    assert build(world, "--lr", "0.001") == 0
    assert fake.ran == list(STAGES)
    cfg = (world / "out" / "build_config.yaml").read_text()
    capsys.readouterr()

    fake.ran.clear()
    assert build(world, "--lr", "0.003", "--spec-steps", "5") == 2
    err = lines(capsys)
    assert fake.ran == []
    assert "--from train" in err[-1] and "--lr 0.001 -> 0.003" in err[-1] and "stage train" in err[-1]
    assert sum("error" in ln for ln in err) == 1
    assert (world / "out" / "build_config.yaml").read_text() == cfg  # settings that built nothing: not written

    assert build(world, "--lr", "0.003", "--spec-steps", "5", "--from", "report") == 2  # too late: train changed
    assert "--from train" in lines(capsys)[-1] and fake.ran == []

    assert build(world, "--lr", "0.003", "--spec-steps", "5", "--from", "train") == 0
    assert fake.ran == ["train", "convert", "check", "eval", "report"]
    assert "lr: 0.003" in (world / "out" / "build_config.yaml").read_text()
    assert "from-stage" not in (world / "out" / "build_config.yaml").read_text()
    capsys.readouterr()

    fake.ran.clear()  # the settings it was made from now: every stage reused
    assert build(world, "--lr", "0.003", "--spec-steps", "5", "--concurrency", "3") == 0
    assert fake.ran == []
    assert build(world, "--lr", "0.003", "--spec-steps", "4") == 2
    assert "--from eval" in lines(capsys)[-1]


def test_the_prompts_are_known_by_content_and_a_changed_dump_is_redone_afresh(world, fake, capsys):
    assert build(world) == 0
    os.utime(world / "prompts.jsonl", (1, 1))  # a touched file holds the same prompts
    fake.ran.clear()
    assert build(world) == 0 and fake.ran == []

    (world / "prompts.jsonl").write_text('{"id": "a", "input_ids": [1, 2, 4]}\n')
    assert build(world) == 2
    err = lines(capsys)[-1]
    assert "--from dump" in err and "--data sha256" in err

    (world / "out" / "dump" / "stale.safetensors").write_bytes(b"x")
    assert build(world, "--from", "dump") == 2  # --url: its server writes into OUT/dump; not ours to empty
    assert "stop that server" in lines(capsys)[-1] and (world / "out" / "dump" / "stale.safetensors").exists()

    assert build(world, "--from", "dump", "--data", world / "prompts.jsonl", "--preset", "tiny-dump", data=False) == 0
    assert not (world / "out" / "dump" / "stale.safetensors").exists()  # the old inputs' samples are gone
    assert any("dumped from other inputs" in ln for ln in lines(capsys))


def test_a_changed_dump_given_by_dump_dir_is_refused_naming_export(world, fake, capsys):
    write_dump(world / "given", samples=3)
    assert build(world, "--dump-dir", world / "given", data=False) == 0
    write_dump(world / "given", samples=5)
    fake.ran.clear()
    assert build(world, "--dump-dir", world / "given", data=False) == 2
    err = lines(capsys)[-1]
    assert "--from export" in err and "3 samples" in err and "5 samples" in err and fake.ran == []


@pytest.mark.parametrize("change", ["edit", "truncate", "add"])
def test_a_draft_changed_after_its_check_is_not_reused(world, fake, capsys, change):
    assert build(world) == 0
    draft = world / "out" / "draft"
    if change == "edit":
        (draft / "model.safetensors").write_bytes(b"\x02" * 4096)
    elif change == "truncate":
        os.truncate(draft / "model.safetensors", 100)
    else:
        (draft / "extra.bin").write_bytes(b"")
    fake.ran.clear()
    assert build(world) == 2
    err = lines(capsys)[-1]
    assert "--from check" in err and "draft" in err and fake.ran == []
    assert build(world, "--from", "check") == 0
    assert fake.ran == ["check", "eval", "report"]
    assert json.loads((world / "out" / "report.json").read_text())["check"] is True


def test_a_draft_changed_after_its_check_in_the_same_run_is_not_certified_and_a_rerun_checks_it(world, fake, capsys):
    fake.after["eval"] = lambda run: os.truncate(run.out / "draft" / "model.safetensors", 10)
    assert build(world, "--json", world / "rep.json") == 1
    err = lines(capsys)[-1]
    assert "changed after its check" in err and "not certified" in err
    rep = json.loads((world / "out" / "report.json").read_text())
    assert rep["check"] is False and "changed after its check" in rep["not_certified"]
    assert "not passed" in (world / "out" / "report.html").read_text()

    fake.after.clear()  # the run that finished (exit 0) says the same as the report on disk
    fake.after["report"] = lambda run: os.truncate(run.out / "draft" / "model.safetensors", 5)
    fake.ran.clear()
    assert build(world) == 1
    assert fake.ran == ["check", "eval", "report"]
    fake.after.clear()
    fake.ran.clear()
    assert build(world, "--json", world / "rep.json") == 0
    assert fake.ran == ["check", "eval", "report"]
    rep = json.loads((world / "rep.json").read_text())
    assert rep["check"] is True and rep["draft_sha256"]


def test_an_interrupted_stage_resumes_with_the_same_settings_and_is_refused_with_others(world, fake, capsys):
    def stop(run):
        raise KeyboardInterrupt

    fake.after["train"] = stop
    assert build(world, "--lr", "0.001") == 130
    fake.after.clear()
    fake.ran.clear()
    assert build(world, "--lr", "0.002") == 2
    assert "stage train started from other inputs" in lines(capsys)[-1] and fake.ran == []
    assert build(world, "--lr", "0.001") == 0
    assert fake.ran == ["train", "convert", "check", "eval", "report"] and fake.resumed_train[-1] is True


GARBAGE = [b"", b"{", b'{"stage": "train", "state": "done"', b"[]", b"null", b'{"stage": "eval", "state": "done"}']


@pytest.mark.parametrize("kind", ["bytes", "fifo", "folder", "symlink"])
def test_a_lost_or_garbled_marker_is_said_once_and_its_stage_redone(world, fake, capsys, kind):
    assert build(world) == 0
    m = state.marker_path(world / "out", "train")
    m.unlink()
    if kind == "bytes":
        m.write_bytes(b'{"stage": "train", "state": "do')
    elif kind == "fifo":
        os.mkfifo(m)
    elif kind == "folder":
        (m / "x").mkdir(parents=True)
    else:
        m.symlink_to(world / "prompts.jsonl")
    capsys.readouterr()
    fake.ran.clear()
    assert build(world) == 0
    said = [ln for ln in lines(capsys) if "marker" in ln]
    assert len(said) == 1 and "stage train" in said[0] and "runs again" in said[0]
    assert fake.ran == ["train", "convert", "check", "eval", "report"]
    fake.ran.clear()
    assert build(world) == 0 and fake.ran == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stage=st.sampled_from(STAGES), text=st.one_of(st.binary(max_size=80), st.sampled_from(GARBAGE)))
def test_any_marker_content_leaves_a_build_a_rerun_finishes(world, fake, capsys, stage, text):
    out = world / "out"
    if not (out / "report.json").exists():
        assert build(world) == 0
    state.marker_path(out, stage).write_bytes(text)
    capsys.readouterr()
    assert build(world) == 0
    assert sum(f"stage {stage}: its marker" in ln for ln in lines(capsys)) == 1
    fake.ran.clear()
    assert build(world) == 0  # and then everything is reused
    assert fake.ran == []


def _lock_of(pid: int, host: str | None = None) -> dict:
    from sglang_eagle3_ext.recipe import lock

    return {"pid": pid, "host": host or socket.gethostname(), "started": "2026-01-01T00:00:00", "command": "build X",
            "proc_start": lock._proc_start(pid), "token": "t"}  # fmt: skip


def _lock_path(world) -> Path:
    return world / "out" / state.STATE_DIR / "lock.json"


def test_a_second_build_on_the_same_out_is_refused_naming_the_holder(world, fake, capsys):
    assert build(world) == 0
    assert not _lock_path(world).exists()  # released at the end
    capsys.readouterr()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_json(_lock_path(world), _lock_of(holder.pid))
        fake.ran.clear()
        assert build(world, "--from", "eval") == 2
        err = lines(capsys)
        assert len(err) == 1 and f"pid {holder.pid}" in err[0] and "build X" in err[0] and "in use" in err[0]
        assert fake.ran == []
    finally:
        holder.kill()
        holder.wait()
    assert build(world, "--from", "eval") == 0  # its holder is gone: taken over, said once
    taken = [ln for ln in lines(capsys) if "lock" in ln]
    assert len(taken) == 1 and "taking over" in taken[0] and f"pid {holder.pid}" in taken[0]
    assert fake.ran == ["eval", "report"]


@pytest.mark.parametrize("kind", ["garbage", "folder"])
def test_an_unreadable_lock_is_taken_over_once(world, fake, capsys, kind):
    (world / "out" / state.STATE_DIR).mkdir(parents=True)
    if kind == "folder":
        (_lock_path(world) / "x").mkdir(parents=True)
    else:
        _lock_path(world).write_bytes(b'{"pid": ')
    assert build(world) == 0
    said = [ln for ln in lines(capsys) if "lock" in ln]
    assert len(said) == 1 and "unreadable" in said[0] and not _lock_path(world).exists()


def test_a_lock_of_another_host_is_never_taken_over(world, fake, capsys):
    (world / "out" / state.STATE_DIR).mkdir(parents=True)
    write_json(_lock_path(world), _lock_of(1, host="elsewhere"))
    assert build(world) == 2
    err = lines(capsys)[-1]
    assert "elsewhere" in err and "delete" in err and fake.ran == []
