"""What the command-line tests share: every tool's finished parser (captured at cli_args.finish, the tool
does not run), a walk over a parser and its sub-parsers, and `sglang-eagle3 ARGV` run in this process."""

from __future__ import annotations

import argparse
import importlib

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.cli import args as cli_args
from sglang_eagle3_ext.cli import naming as cli_naming
from sglang_eagle3_ext.cli.commands import BY_NAME

TOOLS = list(BY_NAME)


class _Built(Exception):
    pass


@pytest.fixture(scope="module")
def parsers():
    """Every tool's finished parser, captured at cli_args.finish (the tool does not run)."""
    got, real = {}, cli_args.finish

    def capture(parser, tool):
        got[tool] = real(parser, tool)
        raise _Built

    cli_args.finish = capture
    try:
        for tool in TOOLS:
            mod, fn = BY_NAME[tool].main.split(":")
            with pytest.raises(_Built):
                getattr(importlib.import_module(f"sglang_eagle3_ext.{mod}"), fn)(["--help"])
    finally:
        cli_args.finish = real
    return got


def _all(parser):
    out = [parser]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for p in a.choices.values():
                out += _all(p)
    return out


@pytest.fixture(autouse=True)
def _as_module_after():
    yield
    assert not cli_naming.called_as_command(), "the dispatcher left its usage name set"


def sg(argv, capfd):
    """`sglang-eagle3 ARGV` in this process: (exit code, stdout, stderr)."""
    try:
        rc = cli.main(list(map(str, argv)))
    except SystemExit as e:  # a tool that let argparse exit
        rc = e.code
    out = capfd.readouterr()
    return rc, out.out, out.err
