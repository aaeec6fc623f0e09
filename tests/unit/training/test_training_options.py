"""The training library without its command line: `train_draft(TrainOptions(...))` applies the rules the
`train` flags apply (a Python caller gets the same refusals, by the flag's name), the command line's defaults
are the library's, and the routes are a registry."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.cli import train as train_cli
from sglang_eagle3_ext.training import ROUTES, TrainDraftError, TrainOptions, train_draft


def _opts(tmp_path, **kw) -> TrainOptions:
    return TrainOptions(data=tmp_path / "data", target=tmp_path / "target", out=tmp_path / "out", **kw)


def test_the_command_line_builds_the_library_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the folders named, which the parser checks
    (tmp_path / "d").mkdir()
    (tmp_path / "t").mkdir()
    args = train_cli.build_parser().parse_args(["--data", "d", "--target", "t", "--out", "o"])
    assert train_cli.options_from_args(args) == TrainOptions(data="d", target="t", out="o")
    quiet = train_cli.build_parser().parse_args(["--data", "d", "--target", "t", "--out", "o", "--quiet"])
    assert train_cli.options_from_args(quiet).log_every == 10**9


def test_draft_arch_choices_are_the_routes():
    action = next(a for a in train_cli.build_parser()._actions if a.dest == "draft_arch")
    assert tuple(action.choices) == tuple(ROUTES) == ("llama", "mla", "dflash")


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("draft_arch", "p-eagle", "--draft-arch 'p-eagle': expected one of llama, mla, dflash"),
        ("lr", -1.0, "--lr -1.0: expected a finite number > 0"),
        ("lr", float("inf"), "--lr inf"),
        ("steps", 0, "--steps 0: expected an integer >= 1"),
        ("ttt_steps", None, "--ttt-steps None"),
        ("seed", True, "--seed True"),
        ("optimizer", "sgd", "--optimizer 'sgd': expected one of muon, adamw"),
        ("train_ratio", 1.5, "--train-ratio 1.5"),
        ("min_val_acc", "high", "--min-val-acc 'high'"),
    ],
)
def test_a_python_caller_gets_the_flags_refusals_before_anything_is_written(tmp_path, field, value, words):
    with pytest.raises(TrainDraftError) as e:
        train_draft(_opts(tmp_path, **{field: value}))
    assert words in str(e.value)
    assert not (tmp_path / "out").exists()


_values = st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=True) | st.text(max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([f.name for f in dataclasses.fields(TrainOptions) if f.name not in ("data", "target", "out")]),
        _values,
        max_size=4,
    )
)
def test_any_settings_are_accepted_or_refused_by_name(tmp_path_factory, fields):
    opts = _opts(tmp_path_factory.getbasetemp(), **fields)
    try:
        opts.check()
    except TrainDraftError as e:
        assert str(e).startswith("--"), e


def test_llama_route_refuses_no_validation_share(tmp_path):
    """speculators' loader needs a validation share: --train-ratio 1 is refused up front, not a traceback."""
    import acceptance_world as W

    target = W.write_target(tmp_path / "target")
    data = W.write_export(tmp_path / "hs", W.sequences(4), target)
    with pytest.raises(TrainDraftError, match="validation share"):
        train_draft(
            TrainOptions(
                data=data,
                target=target,
                out=tmp_path / "out",
                train_ratio=1.0,
                device="cpu",
                draft_vocab_size=16,
                num_workers=0,
            )
        )
