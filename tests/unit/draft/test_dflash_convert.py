"""`convert` of DFlash drafts into SGLang's layout: speculators' (made by speculators 0.9.0 itself) with the +1 rule
(aux index a -> target_layer_ids a - 1, the indices recorded), z-lab's (already SGLang's: block size and mask token id
kept where every release reads them); what SGLang cannot serve as trained is refused. No SGLang import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft import keys
from sglang_eagle3_ext.draft.arch import dflash
from sglang_eagle3_ext.draft.check import check_draft
from sglang_eagle3_ext.draft.convert import convert, convert_config

pytest.importorskip("speculators")
torch = pytest.importorskip("torch")
V = "0.5.16"
QUIET = {"sglang_version": V, "log": lambda *_: None, "progress": False}


def _cfg(d: Path) -> dict:
    return json.loads((d / "config.json").read_text())


def _tensors(d: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(d.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


@pytest.fixture(scope="module")
def spec_draft(tmp_path_factory):
    from sglang_eagle3_ext.tiny.dflash_draft import make_speculators_dflash_draft

    return make_speculators_dflash_draft(tmp_path_factory.mktemp("s") / "spec", n_layers=2, aux_ids=(2, 4, 6))


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    return write_target_config(tmp_path_factory.mktemp("t") / "target", hidden=64, vocab=128, layers=8)


def test_speculators_draft_becomes_sglangs_layout(spec_draft, target, tmp_path):
    report: dict = {}
    out = convert(spec_draft, tmp_path / "out", report=report, **QUIET)
    cfg = _cfg(out)
    assert cfg["architectures"] == [dflash.ARCH] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"] == {
        "block_size": 8,
        "target_layer_ids": [1, 3, 5],
        "hf_hidden_state_indices": [2, 4, 6],
        "mask_token_id": 127,
        "num_target_layers": 8,
    }
    assert "eagle_config" not in cfg and "speculators_model_type" not in cfg and "transformer_layer_config" not in cfg
    assert (
        report["aux_ids"] == [1, 3, 5]
        and report["hf_indices"] == [2, 4, 6]
        and report["format"] == "speculators-dflash"
    )
    src, got = _tensors(spec_draft), _tensors(out)
    assert set(got) == set(src) and all(torch.equal(got[k], src[k]) for k in src)  # the body only, as trained
    assert not {"lm_head.weight", "embed_tokens.weight", "d2t", "t2d"} & set(got)
    rep = check_draft(out, target, sglang_version=V)
    assert not rep.errors and len(rep.loads) == len(src), rep.render()


def test_the_mapping_inverts_speculators_own_z_lab_converter(target):
    """speculators' DFlashConverter maps z-lab ids i to aux indices i + 1, dropping the verifier's last layer
    (i + 1 == n, carried as verifier_last_hidden_states); convert maps them back to i."""
    from speculators.convert.dflash.converter import DFlashConverter

    from sglang_eagle3_ext.tiny.dflash_draft import dflash_draft_config

    release = keys.layout_for_version(V)
    for zlab, kept in (([1, 3, 5], [1, 3, 5]), ([0, 2, 7], [0, 2])):
        spec_cfg = DFlashConverter()._build_config(dflash_draft_config(target_layer_ids=zlab), str(target), None)
        src = json.loads(spec_cfg.to_json_string())
        assert "num_target_layers" not in src  # speculators' converter drops it: recorded as our trainer does
        out, fmt, _ = convert_config(dict(src, num_target_layers=8), release)
        assert fmt == "speculators-dflash" and out["dflash_config"]["target_layer_ids"] == kept


def test_an_index_past_the_targets_layers_is_refused_by_check(tmp_path, target):
    """An aux index n (the verifier's last layer, which speculators carries apart) becomes id n - 1: no target
    captures it, so check against the target refuses it."""
    from sglang_eagle3_ext.tiny.dflash_draft import make_speculators_dflash_draft

    out = convert(make_speculators_dflash_draft(tmp_path / "s", aux_ids=(2, 4, 8)), tmp_path / "o", **QUIET)
    assert _cfg(out)["dflash_config"]["target_layer_ids"] == [1, 3, 7]
    rep = check_draft(out, target, sglang_version=V)
    assert rep.codes == [E.LAYER_INDEX] and "id 7" in rep.errors[0].message


def test_the_targets_layer_count_is_carried_or_the_draft_refused_where_sglang_would(tmp_path, target):
    """SGLang 0.5.14/0.5.16 bound target_layer_ids by dflash_config.num_target_layers, else by the draft's own
    num_hidden_layers (0.5.18+: by max(ids) + 1): a one-layer draft fed ids [0, 1, 2] starts only where the
    target's layer count is recorded. speculators' config keeps it as an extra field; convert carries it."""
    from sglang_eagle3_ext.tiny.dflash_draft import make_speculators_dflash_draft

    src = make_speculators_dflash_draft(tmp_path / "s", n_layers=1, aux_ids=(1, 2, 3), num_target_layers=8)
    out = convert(src, tmp_path / "o", **QUIET)
    assert _cfg(out)["dflash_config"]["num_target_layers"] == 8
    assert not check_draft(out, target, sglang_version=V).errors
    bare = make_speculators_dflash_draft(tmp_path / "bare", n_layers=1, aux_ids=(1, 2, 3), num_target_layers=None)
    for release in ("0.5.14", V):
        with pytest.raises(E.ConversionRefused) as ei:
            convert(bare, tmp_path / release, **{**QUIET, "sglang_version": release})
        (p,) = ei.value.problems
        assert p.code == E.CONFIG_MISSING and "num_hidden_layers=1" in p.message, p.message
        assert '"num_target_layers": N' in p.message and "out-of-range layer id" in p.message, p.message
    warned: list = []
    late = convert(bare, tmp_path / "late", **{**QUIET, "sglang_version": "0.5.18", "log": warned.append})
    assert "num_target_layers" not in _cfg(late)["dflash_config"]
    assert any("before 0.5.18" in w and "num_target_layers" in w for w in warned), warned


@pytest.mark.parametrize("value", [0, "8", 2.5, True])
def test_a_recorded_layer_count_that_is_no_count_is_refused_by_name(tmp_path, value):
    from sglang_eagle3_ext.tiny.dflash_draft import make_speculators_dflash_draft

    src = make_speculators_dflash_draft(tmp_path / "s", num_target_layers=None)
    cfg = dict(_cfg(src), num_target_layers=value)
    with pytest.raises(E.ConversionRefused, match="num_target_layers"):
        convert_config(cfg, keys.layout_for_version(V))


def test_hf_indices_given_on_the_command_line(spec_draft, tmp_path):
    out = convert(spec_draft, tmp_path / "o", hf_indices=[1, 2, 3], **QUIET)
    assert _cfg(out)["dflash_config"]["target_layer_ids"] == [0, 1, 2]
    with pytest.raises(E.ConversionRefused, match="index 0 .the embeddings."):
        convert(spec_draft, tmp_path / "zero", hf_indices=[0, 1, 2], **QUIET)


def test_z_lab_draft_kept_where_every_release_reads_it(tmp_path, target):
    from sglang_eagle3_ext.tiny.dflash_draft import dflash_draft_config, dflash_tensors, write_draft

    cfg = dflash_draft_config(target_layer_ids=(1, 3, 5), dtype="float32")
    dc = cfg.pop("dflash_config")
    cfg.update(block_size=dc["block_size"], dflash_config={"target_layer_ids": [1, 3, 5], "mask_token_id": 127})
    cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    src = write_draft(tmp_path / "zlab", cfg, dflash_tensors(cfg))
    assert check_draft(src, target, sglang_version=V).errors == []
    out = convert(src, tmp_path / "o", **QUIET)
    got = _cfg(out)
    assert "block_size" not in got and "auto_map" not in got
    assert got["dflash_config"] == {
        "block_size": 8,
        "target_layer_ids": [1, 3, 5],
        "hf_hidden_state_indices": [2, 4, 6],
        "mask_token_id": 127,
    }
    assert not check_draft(out, target, sglang_version=V).errors
    a, b = _tensors(src), _tensors(out)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "edit,words",
    [
        (lambda c: c.update(draft_vocab_size=64), "draft_vocab_size=64"),
        (lambda c: c.update(sample_from_anchor=True), "sample_from_anchor"),
        (lambda c: c.update(mask_token_id=None), "mask_token_id"),
        (lambda c: c.update(block_size=1), "block_size=1"),
        (lambda c: c.update(aux_hidden_state_layer_ids=None), "--hf-indices"),
        (lambda c: c.update(speculators_model_type="mtp"), "speculators_model_type='mtp'"),
    ],
)
def test_what_sglang_cannot_serve_as_trained_is_refused(spec_draft, tmp_path, edit, words):
    import shutil

    d = tmp_path / "src"
    shutil.copytree(spec_draft, d)
    cfg = _cfg(d)
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(E.ConversionRefused) as ei:
        convert(d, tmp_path / "out", **QUIET)
    assert words in str(ei.value) and not (tmp_path / "out").exists()


def test_a_reduced_vocabulary_speculators_draft_is_refused(tmp_path):
    from sglang_eagle3_ext.tiny.dflash_draft import make_speculators_dflash_draft

    src = make_speculators_dflash_draft(tmp_path / "s", draft_vocab=64)
    assert {"d2t", "t2d", "lm_head.weight"} <= set(_tensors(src))
    with pytest.raises(E.ConversionRefused, match="full lm_head"):
        convert(src, tmp_path / "o", **QUIET)


def test_convert_command_line(spec_draft, tmp_path):
    from sglang_eagle3_ext.cli.convert import main

    assert main([str(spec_draft), str(tmp_path / "o"), "--sglang", V, "--quiet"]) == 0
    assert _cfg(tmp_path / "o")["dflash_config"]["target_layer_ids"] == [1, 3, 5]


# --- any speculators or z-lab DFlash config: SGLang's layout or a named refusal, never a crash -------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_leaf = st.none() | st.booleans() | st.integers(-2, 130) | st.text(max_size=3)
_value = st.recursive(_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3))
_layer = st.fixed_dictionaries(
    {"hidden_size": st.just(64), "vocab_size": st.just(128)},
    optional={"num_hidden_layers": st.integers(1, 3), "layer_types": _value, "model_type": st.just("qwen3")},
)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["speculators", "z-lab"]),
    fields=st.dictionaries(
        st.sampled_from(
            [
                "block_size",
                "mask_token_id",
                "aux_hidden_state_layer_ids",
                "draft_vocab_size",
                "sample_from_anchor",
                "num_target_layers",
            ]
        ),
        _value | st.lists(st.integers(0, 9), min_size=1, max_size=3),
        max_size=5,
    ),
    dc=st.dictionaries(
        st.sampled_from(["block_size", "target_layer_ids", "mask_token_id", "num_target_layers"]), _value, max_size=3
    ),
    layer=_layer,
    hf=st.none() | st.lists(st.integers(0, 9), min_size=1, max_size=3),
)
def test_any_dflash_source_config_converts_or_is_refused_by_name(kind, fields, dc, layer, hf):
    if kind == "speculators":
        cfg = {"speculators_model_type": "dflash", "architectures": [dflash.ARCH], "transformer_layer_config": layer}
    else:
        cfg = {"architectures": [dflash.ARCH], **layer, "dflash_config": dc}
    cfg.update(fields)
    try:
        out, fmt, _ = convert_config(cfg, keys.layout_for_version(V), hf)
    except E.ConversionRefused as e:
        assert e.problems and all("\n" not in p.message for p in e.problems)
    else:
        assert (
            fmt in dflash.READERS and out["architectures"] == [dflash.ARCH] and isinstance(out["dflash_config"], dict)
        )


@pytest.mark.parametrize("ids", [True, 3, "1,2", [1, "2"]])
def test_speculators_layer_ids_of_another_type_are_refused_by_name(ids):
    cfg = {
        "speculators_model_type": "dflash",
        "architectures": [dflash.ARCH],
        "transformer_layer_config": {"hidden_size": 64, "vocab_size": 128, "model_type": "qwen3"},
        "aux_hidden_state_layer_ids": ids,
    }
    with pytest.raises(E.ConversionRefused, match="aux_hidden_state_layer_ids"):
        convert_config(cfg, keys.layout_for_version(V), None)
