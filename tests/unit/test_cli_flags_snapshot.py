"""Every flag of every command, as its live parser declares it, held to a snapshot: option strings, dest,
default, const, choices, nargs, required, action kind, type, metavar, help, group, and each parser's --help
text. A change to any flag (its spelling, default, help text) shows up here by name; a deliberate one is
written into the snapshot with `SGE3_WRITE_FLAGS_SNAPSHOT=1 pytest tests/unit/test_cli_flags_snapshot.py`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
from cli_fixtures import parsers  # noqa: F401  (fixture)

SNAPSHOT = Path(__file__).with_name("cli_flags_snapshot.json")
WRITE = "SGE3_WRITE_FLAGS_SNAPSHOT"  # a test-only switch, read here only


def _plain(v):
    """A value as JSON holds it; what JSON has no form for, by its repr (a type by its name)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if callable(v):  # by name: where the function lives is no part of the command line
        return f"<{getattr(v, '__qualname__', type(v).__qualname__)}>"
    return repr(v)


def _group_of(parser: argparse.ArgumentParser, action) -> tuple[str | None, int | None]:
    title = next((g.title for g in parser._action_groups if action in g._group_actions), None)
    mutex = next((i for i, g in enumerate(parser._mutually_exclusive_groups) if action in g._group_actions), None)
    return title, mutex


def _action(parser, a: argparse.Action) -> dict:
    title, mutex = _group_of(parser, a)
    out = {
        "options": list(a.option_strings),
        "dest": a.dest,
        "kind": type(a).__name__,
        "default": _plain(a.default),
        "const": _plain(a.const),
        "choices": _plain(list(a.choices) if isinstance(a.choices, dict) else a.choices),
        "nargs": _plain(a.nargs),
        "required": a.required,
        "type": _plain(a.type),
        "metavar": _plain(a.metavar),
        "help": a.help,
        "group": title,
        "mutex": mutex,
    }
    if isinstance(a, argparse._SubParsersAction):
        out["subcommands"] = {c.dest: c.help for c in a._choices_actions}
    return out


def _describe(parser: argparse.ArgumentParser, name: str, out: dict) -> None:
    out[name] = {
        "prog": parser.prog,
        "actions": [_action(parser, a) for a in parser._actions],
        "help": parser.format_help(),
    }
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, p in a.choices.items():
                _describe(p, f"{name} {sub}", out)


def live(parsers) -> dict:
    out: dict = {}
    for tool, p in parsers.items():
        _describe(p, tool, out)
    return out


def differences(want: dict, got: dict) -> list[str]:
    """One line per difference: the command, the flag (by its first option string or dest) and the field."""
    lines = [f"{c}: command {'gone' if c in want else 'new'}" for c in sorted(set(want) ^ set(got))]
    for cmd in sorted(set(want) & set(got)):
        w, g = want[cmd], got[cmd]
        key = lambda a: (a["options"] or [a["dest"]])[0]  # noqa: E731
        wa, ga = {key(a): a for a in w["actions"]}, {key(a): a for a in g["actions"]}
        lines += [f"{cmd} {f}: flag {'gone' if f in wa else 'new'}" for f in sorted(set(wa) ^ set(ga))]
        for f in [k for k in wa if k in ga]:
            for field in sorted(set(wa[f]) | set(ga[f])):
                if wa[f].get(field) != ga[f].get(field):
                    lines.append(f"{cmd} {f}: {field} {wa[f].get(field)!r} -> {ga[f].get(field)!r}")
        if [key(a) for a in w["actions"] if key(a) in ga] != [key(a) for a in g["actions"] if key(a) in wa]:
            lines.append(f"{cmd}: flags in another order")
        for field in ("prog", "help"):
            if w[field] != g[field]:
                lines.append(f"{cmd}: {field} text differs")
    return lines


@pytest.fixture(scope="module")
def fixed_width():
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal; the snapshot is taken at one width
    yield
    if old is None:
        del os.environ["COLUMNS"]
    else:
        os.environ["COLUMNS"] = old


def test_every_flag_matches_the_snapshot(parsers, fixed_width):
    got = live(parsers)
    if os.environ.get(WRITE) == "1":
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(SNAPSHOT.read_text())
    diff = differences(want, got)
    assert not diff, "the command-line flags differ from tests/unit/cli_flags_snapshot.json:\n" + "\n".join(diff)


def test_the_snapshot_covers_every_command_and_subcommand(parsers):
    want = json.loads(SNAPSHOT.read_text())
    assert set(parsers) <= set(want)
    assert {"dump run", "dump export", "dump status"} <= set(want)


def test_a_changed_flag_is_named(parsers, fixed_width):
    want = json.loads(SNAPSHOT.read_text())
    got = json.loads(json.dumps(live(parsers)))
    flag = next(a for a in got["check"]["actions"] if a["options"] and a["options"][0] != "-h")
    flag["default"], flag["help"] = "changed", "changed"
    diff = differences(want, got)
    assert any(f"check {flag['options'][0]}: default" in ln for ln in diff)
    assert any(f"check {flag['options'][0]}: help" in ln for ln in diff)
    moved = json.loads(json.dumps(want))
    moved["check"]["actions"].reverse()
    assert "check: flags in another order" in differences(want, moved)
