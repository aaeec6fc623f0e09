"""The command-line surface: one `sglang-eagle3` command, --version, help with defaults on every option, the
same flag names for the same things, one-line errors with the documented exit codes (cli/common.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_fixtures import _all, parsers  # noqa: F401  (module fixture: every tool's finished parser)

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.cli import common as cli_common
from sglang_eagle3_ext.cli.commands import BY_NAME, COMMANDS
from sglang_eagle3_ext.cli.common import EXIT_BAD_INPUT, EXIT_INTERNAL, run_tool

REPO = Path(__file__).resolve().parents[3]
TOOLS = list(BY_NAME)
SUBCOMMAND_ARGS = {"dump": ["run"]}  # tools whose options live on a sub-parser


def _flags(parser) -> dict[str, argparse.Action]:
    return {s: a for p in _all(parser) for a in p._actions for s in a.option_strings}


def test_every_option_has_help_and_shows_its_default(parsers):
    assert set(parsers) == set(TOOLS)
    for tool, parser in parsers.items():
        for p in _all(parser):
            help_text = p.format_help()
            for a in p._actions:
                if a.help == argparse.SUPPRESS or isinstance(a, argparse._SubParsersAction):
                    continue
                assert a.help, f"{tool} ({p.prog}): {a.option_strings or a.dest} has no help"
                if a.option_strings and a.default not in (None, False, argparse.SUPPRESS, [], ()) and a.dest != "help":
                    shown = p.formatter_class(p.prog)._get_help_string(a)
                    assert "default" in shown, f"{tool}: {a.option_strings} hides its default {a.default!r}"
            assert "--debug" in help_text, tool


def test_same_flag_names_for_the_same_things(parsers):
    f = {t: _flags(p) for t, p in parsers.items()}
    for tool in ("bench", "dump"):
        assert "--url" in f[tool], tool  # a server URL
    for tool in ("check", "convert", "compat"):
        assert f[tool]["--sglang"].metavar == "VERSION", tool  # a SGLang release
    for tool in ("check", "compat", "bench"):
        assert f[tool]["--json"].nargs == "?" and f[tool]["--json"].metavar == "PATH", tool  # JSON output
    for tool in ("check", "train", "bench", "dump"):
        assert "--target" in f[tool], tool  # the target model
    # old spellings still parse but are not advertised
    for tool, old in (
        ("check", "--sglang-version"),
        ("convert", "--sglang-version"),
        ("bench", "--tokenizer"),
        ("dump", "--tokenizer"),
    ):
        assert f[tool][old].help == argparse.SUPPRESS and old not in parsers[tool].format_help(), (tool, old)


def test_usage_names_the_command_it_was_called_by(parsers, capsys):
    assert parsers["check"].prog == "python -m sglang_eagle3_ext.check"
    assert cli.main(["check", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: sglang-eagle3 check ")


def test_top_level(capsys):
    assert cli.main(["--version"]) == 0
    from sglang_eagle3_ext import __version__

    assert capsys.readouterr().out.startswith(f"sglang-eagle3 {__version__} (sglang ")
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {t} " in out for t in TOOLS)
    assert cli.main(["bnch"]) == EXIT_BAD_INPUT and "did you mean 'bench'" in capsys.readouterr().err
    assert cli.main([]) == EXIT_BAD_INPUT


def _one_line_error(capsys, rc, code=EXIT_BAD_INPUT, *words):
    err = capsys.readouterr().err.strip()
    assert rc == code, err
    assert "Traceback" not in err and err, err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["convert", "/nonexistent/src", "/tmp/sge3_never_written"], ["/nonexistent/src"]),
        (["compat", "--source", "/nonexistent/sglang_tree"], ["/nonexistent/sglang_tree"]),
        (["dump", "status", "--dump-dir", "/nonexistent/dump"], ["/nonexistent/dump"]),
        (["launch", "--config", "/nonexistent/preset.yaml", "--dry-run"], ["/nonexistent/preset.yaml"]),
        (["bench", "--url", "localhost:30000"], ["not an http(s) URL"]),
        (["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1,x"], ["--concurrency"]),
        (["patches", "--print", "0.0.1"], ["--print 0.0.1: no static patch"]),
        (["tiny", "--", "-x"], ["looks like an option"]),
        (["check", "/tmp", "--bogus-flag"], ["unrecognized arguments: --bogus-flag"]),
        (["check", "/nonexistent/draft"], ["/nonexistent/draft", "no such directory"]),
        (["launch", "--config", "/tmp", "--dry-run"], ["--config", "/tmp", "is a folder"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's own usage errors exit 2 directly
        rc = e.code
    _one_line_error(capsys, rc, EXIT_BAD_INPUT, *words)


def test_check_bad_draft_folder(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    rc = run_tool(
        "check", __import__("sglang_eagle3_ext.check", fromlist=["main"]).main, [str(tmp_path), "--sglang", "0.5.16"]
    )
    out = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out.out + out.err and "config.json" in out.out + out.err


def test_run_tool_maps_errors_to_codes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(cli_common.ENV_DEBUG, raising=False)

    def reads(argv):
        return json.loads((tmp_path / "x.json").read_text())

    assert run_tool("check", reads, []) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "x.json: No such file or directory" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "x.json").write_text("{bad")
    assert run_tool("check", reads, []) == EXIT_BAD_INPUT
    assert f"a file in {tmp_path}: not valid JSON" in capsys.readouterr().err  # json errors carry no path
    bad = tmp_path / "x.json"

    def reads_file(argv):
        return json.loads(bad.read_text())

    assert run_tool("check", reads_file, []) == EXIT_BAD_INPUT
    assert f"{bad}: not valid JSON" in capsys.readouterr().err

    def bug(argv):
        raise RuntimeError("boom")

    assert run_tool("check", bug, []) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "unexpected RuntimeError: boom" in err and "Traceback" not in err
    assert run_tool("check", bug, ["--debug"]) == EXIT_INTERNAL and "Traceback" in capsys.readouterr().err
    monkeypatch.setenv(cli_common.ENV_DEBUG, "1")
    assert run_tool("check", bug, []) == EXIT_INTERNAL and "Traceback" in capsys.readouterr().err
    assert run_tool("check", lambda a: (_ for _ in ()).throw(SystemExit("bad thing")), []) == EXIT_BAD_INPUT
    assert "python -m sglang_eagle3_ext.check: error: bad thing" in capsys.readouterr().err
    assert run_tool("check", lambda a: (_ for _ in ()).throw(ModuleNotFoundError("x", name="yaml")), []) == 2
    assert "pip install pyyaml" in capsys.readouterr().err


def _py(*args, cwd=REPO):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_entry_points_as_processes(tmp_path):
    p = _py("-m", "sglang_eagle3_ext", "--version")
    assert p.returncode == 0 and p.stdout.startswith("sglang-eagle3 "), p.stderr
    p = _py("-m", "sglang_eagle3_ext.tiny", "--help", cwd=tmp_path)
    assert p.returncode == 0 and "usage: python -m sglang_eagle3_ext.tiny" in p.stdout
    assert not (tmp_path / "--help").exists() and not list(tmp_path.iterdir())  # no model written into ./--help
    p = _py("-m", "sglang_eagle3_ext.cli.patches", "--print", "0.5.16")
    assert p.returncode == 0 and "+++ " in p.stdout
    p = _py("-m", "sglang_eagle3_ext.launch_server", "--preset", "tiny-dump", "--dry-run")
    assert p.returncode == 0 and "SGLang command:" in p.stdout, p.stderr[-2000:]


def test_patches_ship_every_release(capsys):
    from sglang_eagle3_ext.cli import patches as patches_cli
    from sglang_eagle3_ext.compat.static_patches import PATCH_FILE, releases

    rels = releases()
    assert set(rels) == {d.name for d in (REPO / "patches").iterdir() if (d / PATCH_FILE).exists()}
    assert patches_cli.main(["--print", "0.5.16"]) == 0
    assert capsys.readouterr().out == rels["0.5.16"].read_text()


def test_errors_of_the_server_launched_in_process_keep_their_traceback(tmp_path, capsys):
    """`launch` runs SGLang's own __main__ through runpy: a failure there is SGLang's, shown as Python shows it."""
    import runpy

    srv = tmp_path / "fake_server.py"
    srv.write_text("raise ValueError('bad --model-path')\n")
    assert run_tool("launch", lambda argv: runpy.run_path(str(srv), run_name="__main__"), []) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: bad --model-path" in err


@pytest.mark.parametrize("module,tool", [(c.module, c.name) for c in COMMANDS])
def test_every_older_module_entry_still_runs_its_command(module, tool, tmp_path):
    """`python -m sglang_eagle3_ext.<module>` as documented before the commands moved into cli/: the same
    command, under its own name in the usage line."""
    p = _py("-m", f"sglang_eagle3_ext.{module}", "--help", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"usage: python -m sglang_eagle3_ext.{module}" in p.stdout, p.stdout[:300]
