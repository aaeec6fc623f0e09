"""One rule for every command that writes a directory (tiny, train --out, convert DST, dump export --out): it
never deletes or overwrites a directory it did not make. Refused before anything is written: a symlink, a
directory that is, holds or lies inside one of the command's inputs, a non-empty directory that is not a
previous output of the same command; a previous output is replaced (whole, atomically) only on request."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from helpers import assert_names_its_input  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_trust_export import make_dump  # noqa: E402
from test_trust_training import make_data, target, train_cli  # noqa: E402,F401 (module fixture)
from train_world import SMALL  # noqa: E402
from trust_tree import snapshot, user_folder  # noqa: E402

from sglang_eagle3_ext import outdir  # noqa: E402
from sglang_eagle3_ext.cli import convert as conv  # noqa: E402
from sglang_eagle3_ext.cli import tiny as tiny_cli  # noqa: E402
from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402
from sglang_eagle3_ext.cli.dump import main as dump_main  # noqa: E402
from sglang_eagle3_ext.tiny import deepseek_v3 as tiny  # noqa: E402

# ---- tiny ---------------------------------------------------------------------------------------------------


def test_tiny_into_a_folder_of_user_files_is_refused(tmp_path, capsys):
    d = user_folder(tmp_path / "mine")
    before = snapshot(tmp_path)
    assert run_tool("tiny", tiny_cli.main, [str(d)]) == 2
    err = capsys.readouterr().err
    assert str(d) in err and "not a previous output" in err, err
    assert snapshot(tmp_path) == before


def test_tiny_writes_an_empty_folder_and_reuses_only_the_same_target(tmp_path):
    d = tmp_path / "t"
    d.mkdir()  # an empty folder is fine (pytest's mktemp gives those)
    assert tiny.ensure_tiny_target(d, **SMALL) == d
    assert json.loads((d / outdir.MARKER).read_text())["tool"] == "tiny"
    before = snapshot(tmp_path)
    assert tiny.ensure_tiny_target(d, **SMALL) == d  # the same target: reused as it is
    with pytest.raises(outdir.OutputDirRefused, match="made with --seed 0, asked --seed 3; give another folder"):
        tiny.ensure_tiny_target(d, **{**SMALL, "seed": 3})
    assert snapshot(tmp_path) == before


# ---- train --out --------------------------------------------------------------------------------------------


def test_train_out_never_lands_on_its_inputs(target, tmp_path, capsys):
    work = tmp_path / "work"
    tgt = work / "target"
    shutil.copytree(target, tgt)
    data = make_data(work)
    (work / "readme.txt").write_text("keep")
    before = snapshot(tmp_path)
    for out in (tgt, tgt / "draft", data, data / "hidden_states", work):
        assert train_cli(tgt, data, out) == 2, out
        err = capsys.readouterr().err
        assert str(out) in err and ("--target" in err or "--data" in err), err
    assert snapshot(tmp_path) == before


def test_train_out_refuses_a_checkpoint_it_did_not_write(target, tmp_path, capsys):
    ckpt = tmp_path / "someone_elses_draft"
    shutil.copytree(target, ckpt)  # config.json + model.safetensors, not ours
    data = make_data(tmp_path / "d")
    before = snapshot(tmp_path)
    assert train_cli(target, data, ckpt) == 2
    assert "not a previous output of train" in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_train_replaces_its_own_output_only_with_force(target, tmp_path, capsys):
    data, out = make_data(tmp_path), tmp_path / "out"
    assert train_cli(target, data, out) == 0
    assert json.loads((out / outdir.MARKER).read_text())["tool"] == "train"
    before = snapshot(tmp_path)
    assert train_cli(target, data, out) == 2
    assert "--force" in capsys.readouterr().err
    assert snapshot(tmp_path) == before
    (out / "my_eval.txt").write_text("added by the user")  # a user's file in our output: never deleted
    assert train_cli(target, data, out, "--force") == 2
    assert (out / "my_eval.txt").exists()
    (out / "my_eval.txt").unlink()
    assert train_cli(target, data, out, "--force") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]  # no temporary left beside it


# ---- convert DST --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec_draft(tmp_path_factory):
    pytest.importorskip("speculators")
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return make_speculators_draft(tmp_path_factory.mktemp("src") / "spec", aux_ids=(1, 2, 3))


def _convert(src, dst, *extra):
    return run_tool("convert", conv.main, [str(src), str(dst), "--sglang-version", "0.5.16", "--quiet", *extra])


def test_convert_force_through_a_symlinked_dst_is_refused(spec_draft, tmp_path, capsys):
    real = tmp_path / "real"
    assert _convert(spec_draft, real) == 0  # a previous output of convert
    foreign = user_folder(tmp_path / "foreign")
    for to in (real, foreign):
        link = tmp_path / f"link_to_{to.name}"
        link.symlink_to(to, target_is_directory=True)
        before = snapshot(tmp_path)
        assert _convert(spec_draft, link, "--force") == 2
        err = capsys.readouterr().err
        assert "symlink" in err and str(link) in err, err
        assert snapshot(tmp_path) == before


def test_convert_force_replaces_its_own_output(spec_draft, tmp_path):
    out = tmp_path / "o"
    assert _convert(spec_draft, out) == 0
    assert _convert(spec_draft, out) == 2  # not asked to replace
    assert _convert(spec_draft, out, "--force") == 0
    assert json.loads((out / outdir.MARKER).read_text())["tool"] == "convert"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


# ---- dump export --out --------------------------------------------------------------------------------------


def test_export_out_symlink_and_inputs_are_refused(tmp_path, capsys):
    d = make_dump(tmp_path)
    elsewhere = user_folder(tmp_path / "elsewhere")
    link = tmp_path / "link"
    link.symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(tmp_path)
    for out in (link, d, d / "samples", tmp_path, elsewhere):
        rc = run_tool("dump", dump_main, ["export", "--dump-dir", str(d), "--to", "specforge", "--out", str(out)])
        assert rc == 2, out
        assert str(out) in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_an_empty_output_directory_stays_the_same_directory(tmp_path):
    """A mount point or a shell's working directory cannot be renamed over: it is filled in place."""
    out = tmp_path / "mnt"
    out.mkdir()
    ino = os.stat(out).st_ino
    with outdir.writing(out, tool="t", flag="OUT") as tmp:
        (tmp / "a.bin").write_bytes(b"a")
    assert os.stat(out).st_ino == ino and sorted(os.listdir(out)) == sorted([outdir.MARKER, "a.bin"])
    assert sorted(os.listdir(tmp_path)) == ["mnt"]


# ---- property: any output-directory situation -> written whole, or refused with nothing changed -------------

SITUATIONS = (
    "absent",
    "empty",
    "user_files",
    "ours",
    "ours_plus_user_file",
    "ours_plus_deep_user_file",
    "other_tools",
    "bad_marker",
    "marker_only_dir",
    "a_file",
    "symlink_to_ours",
    "symlink_to_user",
    "dangling_symlink",
    "is_input",
    "inside_input",
    "holds_input",
    "fifo_marker",
)


def _make(root: Path, situation: str, source: Path | None = None) -> tuple[Path, list]:
    out, inp = root / "out", root / "input"
    if source is None:
        user_folder(inp)
    else:
        shutil.copytree(source, inp)
    ours = root / "ours_elsewhere"

    def make_ours(p):
        with outdir.writing(p, tool="t", flag="OUT", replace=True) as tmp:
            (tmp / "result.bin").write_bytes(b"r")
            (tmp / "sub").mkdir()
            (tmp / "sub" / "part.bin").write_bytes(b"p")

    if situation == "empty":
        out.mkdir()
    elif situation == "user_files":
        user_folder(out)
    elif situation.startswith("ours") or situation in ("other_tools", "bad_marker", "fifo_marker"):
        make_ours(out)
        if situation == "ours_plus_user_file":
            (out / "later.txt").write_text("user")
        elif situation == "ours_plus_deep_user_file":
            (out / "sub" / "later.txt").write_text("user")
        elif situation == "other_tools":
            (out / outdir.MARKER).write_text(json.dumps({"tool": "someone", "entries": ["result.bin", "sub"]}))
        elif situation == "bad_marker":
            (out / outdir.MARKER).write_text("[1, 2")
        elif situation == "fifo_marker":
            (out / outdir.MARKER).unlink()
            os.mkfifo(out / outdir.MARKER)
    elif situation == "marker_only_dir":
        out.mkdir()
        (out / outdir.MARKER).mkdir()
    elif situation == "a_file":
        out.write_text("a user's file")
    elif situation.startswith("symlink"):
        make_ours(ours)
        out.symlink_to(ours if situation == "symlink_to_ours" else inp, target_is_directory=True)
    elif situation == "dangling_symlink":
        out.symlink_to(root / "nowhere")
    elif situation == "is_input":
        out = inp
    elif situation == "inside_input":
        out = inp / "sub"
    elif situation == "holds_input":
        out = root
    return out, [("input", inp)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(situation=st.sampled_from(SITUATIONS), replace=st.booleans(), fail=st.booleans())
def test_any_output_situation_is_written_whole_or_refused_untouched(tmp_path_factory, situation, replace, fail):
    root = tmp_path_factory.mktemp("o")
    out, inputs = _make(root, situation)
    before = snapshot(root)
    may = situation in ("absent", "empty") or (situation == "ours" and replace)
    try:
        with outdir.writing(out, tool="t", flag="OUT", inputs=inputs, replace=replace) as tmp:
            (tmp / "new.bin").write_bytes(b"n")
            if fail:
                raise RuntimeError("the command failed half-way")
    except outdir.OutputDirRefused as e:
        assert not may, (situation, e)
        assert str(out) in str(e)
        assert snapshot(root) == before
        return
    except RuntimeError:
        assert may and fail
        assert snapshot(root) == before  # a failed run leaves everything as it was
        return
    assert may and not fail, situation
    assert sorted(os.listdir(out)) == sorted([outdir.MARKER, "new.bin"])
    after = snapshot(root)
    gone = {k for k in before if k not in after and not k.startswith("out")}
    assert not gone, gone  # nothing outside the output was removed
    assert not [p for p in root.iterdir() if p.name.startswith(".out.")]  # no temporary left


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(situation=st.sampled_from(SITUATIONS), force=st.booleans())
def test_convert_in_any_output_situation_exits_0_or_2_and_keeps_every_other_file(
    tmp_path_factory, capsys, spec_draft, situation, force
):
    root = tmp_path_factory.mktemp("c")
    out, inputs = _make(root, situation, source=spec_draft)
    before = snapshot(root)
    capsys.readouterr()
    rc = _convert(inputs[0][1], out, *(["--force"] if force else []))
    assert rc in (0, 2)
    after = snapshot(root)
    if rc == 2:
        assert_names_its_input(capsys.readouterr().err, out)
        assert after == before
        return
    assert situation in ("absent", "empty"), situation
    assert json.loads((out / outdir.MARKER).read_text())["tool"] == "convert"
    assert {k: v for k, v in after.items() if not k.startswith("out")} == {
        k: v for k, v in before.items() if not k.startswith("out")
    }
