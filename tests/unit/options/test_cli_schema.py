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
from sglang_eagle3_ext.boundary import BadInput
from sglang_eagle3_ext.cli import build as build_cli
from sglang_eagle3_ext.cli import swap as cli_swap
from sglang_eagle3_ext.compat.options import CompatOptions, PatchesOptions
from sglang_eagle3_ext.draft.options import CheckOptions, ConvertOptions
from sglang_eagle3_ext.draft.swap.options import SwapOptions
from sglang_eagle3_ext.dump.run_options import ExportOptions, RunOptions, StatusOptions
from sglang_eagle3_ext.launch.options import LaunchOptions
from sglang_eagle3_ext.options import values
from sglang_eagle3_ext.options.parser import add_options, hand_added_duplicates, options_from
from sglang_eagle3_ext.options.schema import flag, flag_fields, option_strings
from sglang_eagle3_ext.recipe.config import config_rules
from sglang_eagle3_ext.recipe.options import TRAIN_SET_BY_BUILD, BuildOptions
from sglang_eagle3_ext.refresh.options import RefreshOptions
from sglang_eagle3_ext.tiny.options import TinyOptions
from sglang_eagle3_ext.training.options import TrainOptions
from sglang_eagle3_ext.training.train_flags import ScoreOptions
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
    "check": CheckOptions,
    "convert": ConvertOptions,
    "compat": CompatOptions,
    "patches": PatchesOptions,
    "tiny": TinyOptions,
    "dump export": ExportOptions,
    "dump status": StatusOptions,
    "build": (BuildOptions, TrainOptions, ScoreOptions),  # train's flags too, less those build sets itself
    "train": (TrainOptions, ScoreOptions),
}
# the fields whose flags a command sets itself: no flag of that command derives them
SET_BY_COMMAND = {("build", TrainOptions): TRAIN_SET_BY_BUILD}
# the flags a command adds by hand: the shared ones (cli/args.py) and those of no options type
HAND_ADDED = {"-h", "--help", "--json", "--quiet", "--verbose", "--debug"}
OWN_HAND_ADDED = {
    "train": set(),
    "build": {"--config", "--dry-run"},
    **dict.fromkeys(("eval", "swap", "refresh", "tune", "bench", "dump run", "dump export"), set()),
    **dict.fromkeys(("check", "convert"), {"--sglang", "--sglang-version"}),  # the shared release flag
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
    types = DERIVED[command] if isinstance(DERIVED[command], tuple) else (DERIVED[command],)
    for options_type in types:
        for field in flag_fields(options_type):
            if field.name in SET_BY_COMMAND.get((command, options_type), ()):
                continue
            for opt in option_strings(field):
                action = p._option_string_actions.get(opt) or next(a for a in p._actions if a.dest == opt)
                assert getattr(action, "schema_field", None) == f"{options_type.__name__}.{field.name}", opt
                assert action.dest == field.name, opt


@pytest.mark.parametrize("command", sorted(OWN_HAND_ADDED))
def test_every_flag_but_the_shared_ones_is_derived(parsers, command):
    p = _parser_of(parsers, command)
    by_hand = [o for o, a in p._option_string_actions.items() if not getattr(a, "schema_field", None)]
    assert set(by_hand) == HAND_ADDED | OWN_HAND_ADDED[command]


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


def test_build_config_takes_a_key_per_flag_of_build_checked_by_its_declaration(parsers):
    p = parsers["build"]
    rules = config_rules()
    not_set_by_a_file = {"help", "config", "debug", "json", "dry_run"}
    dests = [a.dest for a in p._actions if a.option_strings and a.dest not in not_set_by_a_file]
    assert list(rules) == list(dict.fromkeys(dests))  # in the order of --help, so build_config.yaml's
    for a in p._actions:
        if a.dest in rules:
            assert rules[a.dest].type is a.type and rules[a.dest].choices == a.choices, a.dest
            assert (rules[a.dest].action == "store_true") == isinstance(a, argparse._StoreTrueAction), a.dest


# a train key in build's config file, refused by its flag's declaration in one line naming the key
TRAIN_KEYS_REFUSED = [
    ("optimizer: sgd\n", "optimizer: 'sgd' is not one of muon, adamw"),
    ("draft-arch: gpt\n", "draft-arch: 'gpt' is not one of llama, mla, dflash"),
    ("keep-checkpoints: 1\n", "keep-checkpoints: expected true or false, got 1"),
    ("select-steps: 0\n", "select-steps: "),
    ("train-ratio: 1.5\n", "train-ratio: expected a finite number in (0, 1]"),
    ("force: true\n", "unknown key 'force'"),  # build sets it itself
]


@pytest.mark.parametrize("text,words", TRAIN_KEYS_REFUSED, ids=[t.split(":")[0] for t, _ in TRAIN_KEYS_REFUSED])
def test_a_train_key_of_build_config_is_checked_by_its_flag(tmp_path, text, words):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(BadInput) as e:
        build_cli.parse(["--config", str(cfg), "--out", "o"])
    assert words in str(e.value) and str(cfg) in str(e.value) and "\n" not in str(e.value)


def test_build_config_flag_over_file_over_default(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("select-by: predicted-accept\nselect-samples: 5\nkeep-checkpoints: true\nlr: 0.003\n")
    a, resolved = build_cli.parse(["--config", str(cfg), "--lr", "0.002", "--out", "o"])
    assert (a.select_samples, a.keep_checkpoints, a.lr, a.ttt_steps) == (5, True, 0.002, 3)
    assert resolved["lr"] == 0.002 and resolved["select_samples"] == 5
    train = build_cli.options(a).train
    assert train["keep_checkpoints"] is True and train["select_samples"] == 5  # the epoch score's too
