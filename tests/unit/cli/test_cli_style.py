"""One command-line style for every command: errors as `sglang-eagle3 COMMAND: error: ...` (the module's name
under `python -m`), flags spelled out in full (an abbreviation or a near miss is refused with `did you mean`,
`launch` included, where what is not ours goes to SGLang), a group without its subcommand prints its help,
`--sglang VERSION` checked the same way wherever it is taken, help descriptions made of whole paragraphs, and
`check` on a folder that is no draft says in one line what it is."""

from __future__ import annotations

import argparse
import importlib
import json
import re

import pytest
from cli_fixtures import _all, _as_module_after, parsers, sg  # noqa: F401  (fixtures)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext import versions
from sglang_eagle3_ext.boundary import Refused
from sglang_eagle3_ext.cli import args as cli_args
from sglang_eagle3_ext.cli import common as cli_common
from sglang_eagle3_ext.cli.commands import BY_NAME
from sglang_eagle3_ext.cli.common import EXIT_BAD_INPUT, run_tool

TOOLS = list(BY_NAME)
RANGE = f"{versions.SUPPORTED_MIN}..{versions.SUPPORTED_MAX}"


def error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if "error:" in ln]


# ---------------------------------------------------------------------------------------------- parsers


def test_every_parser_refuses_abbreviations(parsers):
    for tool, parser in parsers.items():
        for p in _all(parser):
            assert p.allow_abbrev is False and isinstance(p, cli_args.CliParser), (tool, p.prog)


# a valid command line of each parser that takes no flags without a value, to append a probe to
VALID = {
    "check": ["d"],
    "convert": ["s", "d"],
    "compat": [],
    "tiny": [],
    "patches": [],
    "bench": ["--url", "http://h"],
    "train": ["--data", "d", "--target", "t", "--out", "o"],
    "dump run": ["--data", "x", "--dump-dir", "d"],
    "dump export": ["--dump-dir", "d", "--to", "specforge", "--out", "o"],
    "dump status": ["--dump-dir", "d"],
}


@pytest.fixture(scope="module")
def valid_paths(tmp_path_factory):
    """A folder holding the paths VALID names, of the kinds the parsers check: folders d, s, t; the file x."""
    root = tmp_path_factory.mktemp("valid")
    for name in ("d", "s", "t"):
        (root / name).mkdir()
    (root / "x").write_text("")
    return root


def _probes(parsers):
    """(parser, valid argv, flag, action) for every switch and every string-valued flag of every command."""
    out = []
    for key, argv in VALID.items():
        tool, *sub = key.split()
        p = parsers[tool]
        if sub:
            p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[sub[0]]
        for flag, a in p._option_string_actions.items():
            if flag.startswith("--") and len(flag) > 4 and (a.nargs == 0 or (a.type is None and a.nargs is None)):
                out.append((p, argv, flag, a))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_flag_is_taken_abbreviated(parsers, data, capsys, valid_paths, monkeypatch):
    """A proper prefix of a flag (that is not itself a flag) is refused with exit 2, never taken as the flag."""
    monkeypatch.chdir(valid_paths)
    p, argv, flag, action = data.draw(st.sampled_from(_probes(parsers)))
    cut = data.draw(st.integers(3, len(flag) - 1))
    probe = flag[:cut]
    if probe in p._option_string_actions:
        return
    tok = probe if action.nargs == 0 else f"{probe}=x"
    with pytest.raises(SystemExit) as e:
        p.parse_args([*argv, tok])
    assert e.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {tok}" in err and "did you mean" in err and err.count("\n") == 1, err


def test_a_near_miss_is_named(capfd, tmp_path):
    rc, _, err = sg(["check", tmp_path, "--headers"], capfd)
    assert rc == 2 and "did you mean --headers-only?" in err, err
    rc, _, err = sg(["dump", "status", "--dump-dri", tmp_path], capfd)
    assert rc == 2 and "did you mean --dump-dir?" in err, err
    assert re.match(r"sglang-eagle3 dump( status)?: error: ", error_lines(err)[0]), err


def test_a_group_without_its_subcommand_prints_its_help(capfd):
    rc, out, err = sg(["dump"], capfd)
    assert rc == 2 and "required" not in err, err
    assert "usage: sglang-eagle3 dump" in err and all(c in err for c in ("run", "export", "status")), err
    rc, out, err = sg([], capfd)
    assert rc == 2 and "commands:" in err and not out


# ---------------------------------------------------------------------------------------------- errors
def _target_config(tmp_path):
    t = tmp_path / "target"
    t.mkdir()
    (t / "config.json").write_text(
        json.dumps(
            {"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 4}
        )
    )
    return t


def _error_cases(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    not_draft = _target_config(tmp_path)
    return {
        "usage": ["check"],
        "check": ["check", tmp_path / "nope"],
        "convert refused": ["convert", not_draft, tmp_path / "out", "--sglang", "0.5.16", "--quiet"],
        "train": ["train", "--data", empty, "--target", not_draft, "--out", tmp_path / "t_out", "--device", "cpu"],
        "dump export": [
            "dump",
            "export",
            "--dump-dir",
            tmp_path / "nope",
            "--to",
            "specforge",
            "--out",
            tmp_path / "o",
        ],
        "dump status usage": ["dump", "status"],
        "launch": ["launch", "--config", tmp_path / "nope.yaml", "--dry-run"],
        "compat": ["compat", "--source", tmp_path / "nope"],
        "patches": ["patches", "--print", "0.0.1"],
        "tiny": ["tiny", "--", "-x"],
    }


CASES = [
    "usage",
    "check",
    "convert refused",
    "train",
    "dump export",
    "dump status usage",
    "launch",
    "compat",
    "patches",
    "tiny",
]


@pytest.mark.parametrize("case", CASES)
def test_every_error_has_one_form(case, tmp_path, capfd):
    if case in ("convert refused", "train"):
        pytest.importorskip("torch")
    argv = _error_cases(tmp_path)[case]
    rc, _, err = sg(argv, capfd)
    lines = error_lines(err)
    assert rc == EXIT_BAD_INPUT and lines, err
    form = re.compile(rf"sglang-eagle3 {argv[0]}( [a-z]+)?: error: \S")
    assert all(form.match(ln) for ln in lines), err
    assert "Traceback" not in err and "usage:" not in err, err


def test_module_entries_keep_the_shape(tmp_path, capfd):
    """Under `python -m sglang_eagle3_ext.MODULE` the prefix is the module's, the shape the same."""
    from sglang_eagle3_ext.cli import launch as launch_server
    from sglang_eagle3_ext.cli import train as train_draft

    pytest.importorskip("torch")
    rc = run_tool(
        "train",
        train_draft.main,
        [
            "--data",
            str(tmp_path),
            "--target",
            str(_target_config(tmp_path)),
            "--out",
            str(tmp_path / "o"),
            "--device",
            "cpu",
        ],
    )
    err = capfd.readouterr().err
    assert rc == 2 and error_lines(err)[0].startswith("python -m sglang_eagle3_ext.train_draft: error: "), err
    rc = run_tool("launch", launch_server.main, ["--config", str(tmp_path / "x.yaml"), "--dry-run"])
    err = capfd.readouterr().err
    assert rc == 2 and error_lines(err)[0].startswith("python -m sglang_eagle3_ext.launch_server: error: "), err


def test_envs_check_keeps_the_shape(monkeypatch, capsys):
    from sglang_eagle3_ext import envs

    monkeypatch.setenv(envs.DEBUG, "banana")
    assert envs.main(["--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m sglang_eagle3_ext.envs: error: {envs.DEBUG}="), err


def test_error_line_replaces_a_foreign_prefix():
    assert cli_common.error_line("check", "train_draft: error: x") == "python -m sglang_eagle3_ext.check: error: x"
    assert cli_common.error_line("check", "a.json: error: x").endswith("check: error: a.json: error: x")


# ---------------------------------------------------------------------------------------------- launch
@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    """launch's start replaced: a call records that SGLang would have been started."""
    from sglang_eagle3_ext.launch import start

    started = []
    monkeypatch.setattr(start, "launch", lambda plan, *checks: started.append(plan))
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return started


def _topo(tmp_path):
    from test_launch_topology import FAKES

    f = tmp_path / "topo.json"
    f.write_text(FAKES["nvlink"][0]().to_json())
    return str(f)


@pytest.mark.sglang
@pytest.mark.parametrize(
    "argv,words",
    [
        (["--dry-runn"], ["--dry-runn", "did you mean --dry-run?"]),
        (["--dry-ru"], ["--dry-ru", "did you mean --dry-run?"]),  # an abbreviation of ours, whatever SGLang does
        (["--presets", "tiny"], ["did you mean --preset"]),
        (["--dry-run", "--no-such-flag", "1"], ["--no-such-flag", "neither a flag of launch nor of SGLang"]),
        (["--dry-run", "--mem-fraction-statik", "0.3"], ["did you mean --mem-fraction-static?"]),
    ],
)
def test_launch_refuses_what_is_neither_ours_nor_sglangs(argv, words, no_launch, capfd, tmp_path):
    rc, _, err = sg(
        ["launch", "--preset", "tiny", "--skip-draft-check", "--topology-file", _topo(tmp_path), *argv], capfd
    )
    assert rc == 2 and not no_launch, err
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("sglang-eagle3 launch: error: "), err
    assert all(w in lines[0] for w in words) and "usage:" not in err, err


@pytest.fixture(scope="module")
def launch_parts():
    from sglang_eagle3_ext.cli import launch as launch_server
    from sglang_eagle3_ext.launch import command_line as launch_cli

    p = launch_server.our_parser()
    theirs, version = launch_cli._sglang_flags()
    # SGLang's flags, read once from its installed source (each read parses it again: about 0.3 s an example)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch_cli, "_sglang_flags", lambda: (theirs, version))
        yield p, launch_cli, theirs


@pytest.mark.sglang
@settings(max_examples=150, deadline=None)
@given(name=st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz-"), min_size=1, max_size=24))
def test_launch_takes_only_flags_sglang_resolves(launch_parts, name):
    """Whatever flag follows our own: refused (boundary.Refused), or SGLang's exact flag or one of the short forms its
    documentation writes (`--tp`), never an abbreviation of ours."""
    p, launch_cli, theirs = launch_parts
    flag = "--" + name
    try:
        ours, rest = p.parse_known_args(["--preset", "tiny", "--dry-run", flag])
    except SystemExit:  # one of ours used wrongly (no value, or --config beside --preset): argparse's exit 2
        return
    mine = [f for f in p._option_string_actions if f.startswith("--")]
    try:
        launch_cli.check_flags(p, ours, rest)
    except Refused as e:
        assert str(e).startswith(f"{flag}: "), e
        return
    if flag in mine:
        return  # ours: parsed by our parser, never passed on
    assert flag in theirs or [s for s in theirs if s.startswith(flag)] == [launch_cli.SGLANG_SHORT_FORMS.get(flag)], (
        flag
    )
    assert not any(m.startswith(flag) for m in mine), flag


@pytest.mark.sglang
def test_launch_keeps_sglangs_own_flags_and_abbreviations(no_launch, capfd, tmp_path):
    rc, out, err = sg(
        [
            "launch",
            "--preset",
            "tiny",
            "--dry-run",
            "--skip-draft-check",
            "--tp",
            "2",
            "--mem-fraction-static=0.4",
            "--topology-file",
            _topo(tmp_path),
        ],
        capfd,
    )
    assert rc == 0, err
    assert "--tp 2" in out and "--mem-fraction-static=0.4" in out and not no_launch


# ---------------------------------------------------------------------------------------------- --sglang
def _sglang_cases(tmp_path):
    return {
        "check": ["check", tmp_path],
        "convert": ["convert", tmp_path, tmp_path / "d"],
        "compat": ["compat", "--source", tmp_path],
    }


@pytest.mark.parametrize("tool", ["check", "convert", "compat"])
@pytest.mark.parametrize("flag", ["--sglang", "--sglang-version"])
def test_sglang_release_syntax_is_checked(tool, flag, tmp_path, capfd):
    rc, out, err = sg([*_sglang_cases(tmp_path)[tool], flag, "banana"], capfd)
    assert rc == 2 and not out, err
    assert error_lines(err)[0].startswith(f"sglang-eagle3 {tool}: error: argument {flag}: ") and "'banana'" in err


@pytest.mark.parametrize("tool", ["check", "convert", "compat"])
def test_a_release_outside_the_range_is_a_warning_naming_the_range(tool, tmp_path, capfd):
    _, _, err = sg([*_sglang_cases(tmp_path)[tool], "--sglang", "0.6.0"], capfd)
    warn = [ln for ln in err.splitlines() if "warning:" in ln]
    assert warn and warn[0].startswith(f"sglang-eagle3 {tool}: warning: --sglang 0.6.0") and RANGE in warn[0], err
    _, _, err = sg([*_sglang_cases(tmp_path)[tool], "--sglang", "0.5.16"], capfd)
    assert "warning: --sglang" not in err, err


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=12).filter(lambda t: not t.startswith("-")))
def test_any_sglang_text_is_a_release_or_exit_2(parsers, text, capsys):
    from packaging.version import Version

    try:
        ns = parsers["check"].parse_args(["d", "--sglang", text])
    except SystemExit as e:
        assert e.code == 2
        assert "argument --sglang" in capsys.readouterr().err
        return
    assert ns.sglang_version == text and Version(text).release


def test_check_asks_for_the_flag_its_help_lists(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(versions, "installed_version", lambda: None)
    rc, _, err = sg(["check", tmp_path], capfd)
    assert rc == 2 and "--sglang X" in err and "--sglang-version" not in err, err


# ---------------------------------------------------------------------------------------------- help
def _paragraphs(text: str) -> list[str]:
    return [p.strip("\n") for p in text.strip().split("\n\n")]


def test_help_descriptions_are_whole_paragraphs(parsers):
    """A description taken from the module's docstring takes whole paragraphs (no line cut out of one)."""
    for tool, parser in parsers.items():
        mod = importlib.import_module(f"sglang_eagle3_ext.{BY_NAME[tool].main.split(':')[0]}")
        doc = _paragraphs(mod.__doc__)
        desc = _paragraphs(parser.description or "")
        prose = [p for p in desc if p and not p.startswith(" ")]  # indented: an example, not a sentence
        assert prose and prose[-1].rstrip().endswith((".", ")", "?", ":")), (tool, desc)
        if tool != "launch":  # launch's is its own sentence, the rest come from the docstring
            assert all(p in doc for p in desc), f"{tool}: its help cuts a paragraph of its docstring: {desc}"


def test_check_help_names_its_flags_and_scan():
    from sglang_eagle3_ext.cli import check

    text = check.build_parser().format_help()
    assert "--sglang VERSION" in text and "--headers-only" in text and "hub id" in text


# ---------------------------------------------------------------------------------------------- check
@pytest.mark.parametrize(
    "kind,words",
    [
        ("empty", "no model folder"),
        ("data", "training data"),
        ("dump", "hidden-state dump"),
        ("target", "this is a DeepseekV3ForCausalLM model"),
    ],
)
def test_check_on_a_folder_that_is_no_draft_says_what_it_is(kind, words, tmp_path, capfd):
    d = tmp_path / kind
    d.mkdir()
    if kind == "data":
        (d / "hs_0.safetensors").write_bytes(b"\0" * 16)
    elif kind == "dump":
        (d / "dump_meta.json").write_text("{}")
        (d / "manifests").mkdir()
    elif kind == "target":
        (d / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 8}))
        (d / "model.safetensors").write_bytes(b"\0" * 16)
    rc, out, err = sg(["check", d, "--sglang", "0.5.16"], capfd)
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert rc == 1 and len(errors) == 1 and words in errors[0] and "not an EAGLE-3 draft" in errors[0], out + err
    assert len(out.splitlines()) <= 3, out
