"""draft/layers.py: the default aux layers and the release's +1 rule, one implementation each, and the dump and
training choosing the same layers when none are named."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from train_world import SMALL, train_args, write_samples

from sglang_eagle3_ext.draft import layers as L
from sglang_eagle3_ext.draft.keys import layout_for_version


def test_default_is_sglangs_where_it_names_three_layers():
    assert L.default_layers(61) == L.sglang_default_layers(61) == [2, 30, 58]
    assert L.default_layers(7) == [2, 3, 4]
    assert L.default_layers(4) == [1, 2, 3] and L.default_layers(6) == [1, 3, 5]  # SGLang's has duplicates here
    for n in range(4, 200):
        ids = L.default_layers(n)
        assert ids == sorted(set(ids)) and len(ids) == 3 and 0 < ids[0] and ids[-1] < n


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["0.5.10", "0.5.14", "0.5.16", "0.5.23"]),
    st.lists(st.integers(0, 90), min_size=1, max_size=5, unique=True).map(sorted),
)
def test_release_ids_are_captured_as_the_hf_indices(version, hf):
    """The inverse rule: ids written for a release capture exactly `hf` under its +1 rule, else a warning."""
    layout = layout_for_version(version)
    ids, warn = L.release_aux_ids(hf, layout)
    if warn is None:
        assert L.release_capture(ids, layout.capture_always_plus_one) == hf
    else:
        assert ids == hf and (hf[0] == 0 if layout.capture_always_plus_one else hf[0] == 1)


@pytest.mark.parametrize(
    "cfg,n,always,want",
    [
        ({"eagle_config": {L.HF_INDICES_FIELD: [1, 3, 5], L.AUX_IDS_FIELD: [0, 2, 4]}}, 6, False, [1, 3, 5]),
        ({"eagle_config": {L.AUX_IDS_FIELD: [1, 3, 5]}}, 8, False, [2, 4, 6]),
        ({"eagle_config": {L.AUX_IDS_FIELD: [2, 4, 6]}}, 8, False, [2, 4, 6]),
        ({"eagle_config": {L.AUX_IDS_FIELD: [2, 4, 6]}}, 8, True, [3, 5, 7]),
        ({"eagle_config": {}}, 61, False, [2, 30, 58]),
        ({}, 8, True, [2, 4, 5]),
    ],
)
def test_fed_hf_indices(cfg, n, always, want):
    assert L.fed_hf_indices(cfg, n, always)[0] == want


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 99) | st.floats(allow_nan=True) | st.text(max_size=4),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    ec=_JSON | st.fixed_dictionaries({}, optional={L.HF_INDICES_FIELD: _JSON, L.AUX_IDS_FIELD: _JSON}),
    n=st.integers(1, 90),
)
def test_any_draft_config_gives_layers_or_a_named_error(ec, n):
    """A draft's config.json is outside input read at the server's start-up: indices, or a BadInput naming it."""
    from sglang_eagle3_ext.boundary import BadInput

    try:
        layers, why = L.fed_hf_indices({"eagle_config": ec}, n, False, where="d/config.json")
    except BadInput as e:
        assert str(e).startswith("d/config.json: eagle_config")
        return
    assert all(type(i) is int for i in layers) and len(layers) >= 1 and why


# ---- the dump and training agree --------------------------------------------------------------------------


def test_training_without_recorded_ids_uses_the_dumps_default_layers(tmp_path, capsys):
    """Hidden states of a 4-layer target with no layer ids beside them: training takes the layers the dump
    captures by default (a draft must be fed the states it was trained on), rather than refusing SGLang's
    [2, 2, 1]."""
    pytest.importorskip("torch")
    from sglang_eagle3_ext.cli.train import main
    from sglang_eagle3_ext.dump.config import DumpConfig
    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target

    target = ensure_tiny_target(tmp_path / "target", **SMALL)
    dumped = DumpConfig(str(tmp_path / "dump"), None).resolve_layers(SMALL["num_hidden_layers"])
    write_samples(tmp_path / "data", 4, aux=dumped, metadata=False)
    out = tmp_path / "summary.json"
    rc = main(
        [
            *train_args(tmp_path / "data", target, tmp_path / "draft"),
            "--draft-arch",
            "mla",
            "--steps",
            "1",
            "--device",
            "cpu",
            "--min-val-acc",
            "0",
            "--json",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["layer_ids"] == dumped == [1, 2, 3]
