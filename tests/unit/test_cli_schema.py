"""Each flag of a converted command is declared once, on its options dataclass (`options.schema.flag`): the live
parser holds every such field as a derived flag, nothing adds a second flag by hand for a field the schema
derives, and the namespace reads back into the dataclass."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from cli_fixtures import _all, parsers  # noqa: F401  (fixture)

from sglang_eagle3_ext.acceptance.options import EvalOptions
from sglang_eagle3_ext.bench.options import BenchOptions
from sglang_eagle3_ext.build.options import BuildOptions
from sglang_eagle3_ext.cli import swap as cli_swap
from sglang_eagle3_ext.draft.swap_options import SwapOptions
from sglang_eagle3_ext.dump.run_options import RunOptions
from sglang_eagle3_ext.launch.options import LaunchOptions
from sglang_eagle3_ext.options import values
from sglang_eagle3_ext.options.parser import add_options, hand_added_duplicates, options_from
from sglang_eagle3_ext.options.schema import flag, flag_fields, option_strings
from sglang_eagle3_ext.refresh.options import RefreshOptions
from sglang_eagle3_ext.tune.options import TuneOptions

# the commands whose flags the schema derives, and where
DERIVED = {
    "swap": SwapOptions,
    "refresh": RefreshOptions,
    "dump run": RunOptions,
    "bench": BenchOptions,
    "tune": TuneOptions,
    "launch": LaunchOptions,
    "eval": EvalOptions,
    "build": BuildOptions,
}


def _parser_of(parsers, command: str) -> argparse.ArgumentParser:
    tool, _, sub = command.partition(" ")
    p = parsers[tool]
    if sub:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[sub]
    return p


def test_no_command_declares_a_derived_field_twice(parsers):
    found = [line for p in parsers.values() for line in hand_added_duplicates(p)]
    assert not found, found


@pytest.mark.parametrize("command", sorted(DERIVED))
def test_every_flag_field_is_derived_on_its_command(parsers, command):
    p = _parser_of(parsers, command)
    for field in flag_fields(DERIVED[command]):
        for opt in option_strings(field):
            action = p._option_string_actions[opt]
            assert getattr(action, "schema_field", None) == f"{DERIVED[command].__name__}.{field.name}", opt
            assert action.dest == field.name, opt


def test_a_hand_added_duplicate_is_named():
    p = cli_swap.build_parser()
    assert hand_added_duplicates(p) == []
    p.add_argument("--server-url", dest="url", help="the server")  # a second spelling of SwapOptions.url
    assert hand_added_duplicates(p) == [f"{p.prog}: --server-url declares SwapOptions.url again"]


def test_a_hand_added_duplicate_in_a_subcommand_is_named(parsers):
    p = _parser_of(parsers, "dump run")
    try:
        p.add_argument("--server", dest="url")
        assert any("--server declares RunOptions.url again" in ln for ln in hand_added_duplicates(parsers["dump"]))
    finally:  # the fixture's parsers are shared by the module's tests
        p._remove_action(p._option_string_actions.pop("--server"))


def test_the_same_spelling_twice_is_refused_when_the_parser_is_built():
    p = argparse.ArgumentParser()
    add_options(p, SwapOptions)
    with pytest.raises(argparse.ArgumentError, match="--timeout"):
        p.add_argument("--timeout", type=float)


def test_the_namespace_reads_back_into_the_options():
    a = cli_swap.build_parser().parse_args(["--url", "http://127.0.0.1:1", "--draft", "d", "--no-local-check"])
    opts = options_from(a, SwapOptions, say=print)
    assert opts == SwapOptions(
        url="http://127.0.0.1:1", draft="d", timeout=600.0, local_check=False, settle=60.0, say=print
    )


def test_a_parser_default_apart_from_the_fields_and_a_hidden_alias():
    @dataclasses.dataclass(kw_only=True)
    class Opts:
        levels: tuple = flag((1, 2), parser_default="1:2", type=values.new_tokens, help="levels")
        name: str | None = flag(None, names="--label", aliases="--old-label", metavar="N", help="a label")

    p = argparse.ArgumentParser()
    add_options(p, Opts)
    assert p.get_default("levels") == "1:2"  # argparse runs the type on a string default
    assert options_from(p.parse_args([]), Opts) == Opts(levels=(1, 2))
    assert options_from(p.parse_args(["--old-label", "x"]), Opts).name == "x"
    assert "--old-label" not in p.format_help()
    assert p._option_string_actions["--old-label"].metavar is None
