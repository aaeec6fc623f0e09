"""The command table is the only list of commands: every row runs, is in `--help`, and has its `python -m` entry;
the wheel ships what `patches` prints and nothing of the maintainers' scripts."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import tomllib

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.cli.commands import COMMANDS, Command, CommandRefused, register

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_row_resolves(command):
    mod, fn = command.main.split(":")
    assert callable(getattr(importlib.import_module(f"sglang_eagle3_ext.{mod}"), fn))
    spec = importlib.util.find_spec(f"sglang_eagle3_ext.{command.module}")
    assert spec is not None, f"{command.name}: no module sglang_eagle3_ext.{command.module}"
    if spec.submodule_search_locations:  # a package runs as `python -m` through its __main__
        assert importlib.util.find_spec(f"sglang_eagle3_ext.{command.module}.__main__") is not None
    assert command.summary and "\n" not in command.summary


ROW = Command("swap", "cli.swap", "load a new draft into a running server")
REFUSED = {
    "no cli/p-eagle.py (its main)": Command("p-eagle", "cli.swap", "a command without its module"),
    "`python -m` entry 'cli.nowhere' is no module or package with a __main__": Command("swap", "cli.nowhere", "x"),
    "the summary is not one line": Command("swap", "cli.swap", "two\nlines"),
    "name 'Swap' is no lower-case command word": Command("Swap", "cli.swap", "x"),
}


@pytest.mark.parametrize("why", list(REFUSED))
def test_a_row_that_does_not_conform_is_refused_naming_the_command_and_what_it_lacks(why):
    row = REFUSED[why]
    with pytest.raises(CommandRefused) as ei:
        register(row)
    msg = str(ei.value)
    assert msg == f"command {row.name!r} does not conform: {why}", msg
    assert register(ROW) == (ROW,)


def test_a_name_taken_twice_is_refused():
    with pytest.raises(CommandRefused, match="^command 'swap' does not conform: the name is taken$"):
        register(ROW, ROW)


def test_help_lists_every_command_once():
    lines = cli.usage().splitlines()
    names = [ln.split()[0] for ln in lines[lines.index("commands:") + 1 :] if ln.startswith("  ")]
    assert names == [c.name for c in COMMANDS]


def test_names_are_unique():
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    assert len({c.module for c in COMMANDS}) == len(COMMANDS)


def test_wheel_ships_each_patch_and_no_script():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    forced = cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    shipped = {src for src in forced if src.startswith("patches")}
    on_disk = {f"patches/{d.name}" for d in (REPO / "patches").iterdir() if d.is_dir() and d.name != "__pycache__"}
    assert on_disk <= shipped, f"add to pyproject's force-include: {sorted(on_disk - shipped)}"
    assert not [s for s in shipped if s.endswith(".py") or s == "patches"], shipped


def test_readme_lists_every_command():
    readme = (REPO / "README.md").read_text()
    rows = {ln.split("|")[1].strip().strip("`").split()[0] for ln in readme.splitlines() if ln.startswith("| `")}
    missing = [c.name for c in COMMANDS if c.name not in rows]
    assert not missing, f"README's command table lacks {missing}"
