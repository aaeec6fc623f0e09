"""DFlash drafts (SGLang's DFlashDraftModel) in `check`: a speculators-made draft converted passes; a malformed one
is refused in one line per problem naming the tensor or field and the fix; the layer ids against the target's layer
count and a dump's layers; any config read without a crash. No SGLang import: every call names the release."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft.arch import dflash
from sglang_eagle3_ext.draft.check import check_draft, describe_draft
from sglang_eagle3_ext.draft.convert import convert

pytest.importorskip("speculators")
torch = pytest.importorskip("torch")
V = "0.5.16"
PKG = Path(__file__).resolve().parents[3] / "sglang_eagle3_ext"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    from sglang_eagle3_ext.tiny.dflash_draft import make_speculators_dflash_draft

    root = tmp_path_factory.mktemp("dflash")
    src = make_speculators_dflash_draft(root / "spec", n_layers=2, aux_ids=(1, 2, 3))
    return convert(src, root / "good", sglang_version=V, log=lambda *_: None)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    return write_target_config(tmp_path_factory.mktemp("t") / "target", hidden=64, vocab=128, layers=8)


def _one_line(rep) -> None:
    assert rep.errors and all("\n" not in p.message for p in rep.problems), rep.render()


def test_a_converted_speculators_draft_passes_on_releases_with_dflash(good, target):
    for version in ("0.5.14", "0.5.16", "0.5.23"):
        rep = check_draft(good, target, sglang_version=version)
        assert not rep.errors, rep.render()
        assert rep.draft_class == dflash.ARCH and "fc.weight" in rep.loads and "hidden_norm.weight" in rep.loads
    info = describe_draft(good, V, target=target)
    assert info["layout"] == "dflash" and info["k"] == 3 and info["aux_ids"] == [0, 1, 2]
    assert info["hf_indices"] == [1, 2, 3] and info["ok"]


def test_a_release_without_dflash_is_refused_by_name(good):
    rep = check_draft(good, sglang_version="0.5.10")
    assert rep.codes == [E.DRAFT_CLASS] and "DFlash" in rep.errors[0].message and ">= 0.5.14" in str(rep.errors[0])


@pytest.mark.parametrize("name", sorted(__import__("malformed_drafts").DFLASH_MALFORMED))
def test_a_malformed_draft_is_refused_in_one_line_per_problem(good, target, tmp_path, name):
    from malformed_drafts import make_dflash_variant

    code, d = make_dflash_variant(good, name, tmp_path / name)
    rep = check_draft(d, target, sglang_version=V)
    assert code in rep.codes, rep.render()
    _one_line(rep)


def test_each_refusal_names_what_is_wrong_and_the_fix(good, target, tmp_path):
    from malformed_drafts import make_dflash_variant

    words = {
        "layer_renamed": ("layers.0.attn.q_proj.weight", "layers.0.self_attn.q_proj.weight"),
        "missing_norm": ("norm.weight", "missing"),
        "fc_other_k": ("fc.weight", "K=2", "target_layer_ids"),
        "block_size_disagrees": ("block_size=4", "dflash_config.block_size=8", "keep only"),
        "block_size_1": ("block_size=1", ">= 2"),
        "mask_outside_vocab": ("mask_token_id=128", "< 128"),
        "mask_missing": ("mask_token_id", "set the trained id"),
        "nan_weight": ("layers.0.mlp.down_proj.weight", "NaN"),
        "reduced_vocab_head": ("lm_head.weight", "[64, 64]", "draft_vocab_size = vocab_size"),
        "ids_not_increasing": ("[0, 2, 1]", "ascending"),
    }
    for name, wanted in words.items():
        code, d = make_dflash_variant(good, name, tmp_path / name)
        msg = " ".join(p.message for p in check_draft(d, target, sglang_version=V).errors if p.code == code)
        assert all(w in msg for w in wanted), (name, msg)


def test_a_model_prefix_is_what_sglang_resolves(good, tmp_path):
    """SGLang's DFlash load_weights resolves `model.` names: accepted, not reported as unknown."""
    from malformed_drafts import edit_tensors

    d = tmp_path / "prefixed"
    __import__("shutil").copytree(good, d)
    edit_tensors(d, lambda t: t.update({"model." + k: t.pop(k) for k in list(t)}))
    rep = check_draft(d, sglang_version=V)
    assert not rep.errors and rep.renames == {"strip 'model.'": 25}, rep.render()


def _with_ids(good, tmp_path, ids, **extra) -> Path:
    from malformed_drafts import edit_config

    d = tmp_path / ("ids" + "_".join(map(str, ids)))
    __import__("shutil").copytree(good, d)
    edit_config(
        d, lambda c: c["dflash_config"].update(target_layer_ids=ids, hf_hidden_state_indices=[i + 1 for i in ids])
    )
    edit_config(d, lambda c: c.update(extra))
    return d


def test_layer_ids_within_what_the_target_captures(good, target, tmp_path):
    """A target of 8 layers captures hidden_states[id + 1] before layer id + 1: ids 0..6 (7, the last layer's
    output, never); the draft config alone cannot tell."""
    ok = check_draft(_with_ids(good, tmp_path, [0, 3, 6]), target, sglang_version=V)
    assert not ok.errors, ok.render()
    d = _with_ids(good, tmp_path, [0, 3, 7])
    assert not check_draft(d, sglang_version=V).errors
    rep = check_draft(d, target, sglang_version=V)
    assert rep.codes == [E.LAYER_INDEX] and "ids 0..6" in rep.errors[0].message and "id 7" in rep.errors[0].message
    _one_line(rep)


def test_the_recorded_hf_indices_must_be_the_ids_plus_one(good, tmp_path):
    from malformed_drafts import edit_config

    d = _with_ids(good, tmp_path, [0, 1, 2])
    edit_config(d, lambda c: c["dflash_config"].update(hf_hidden_state_indices=[0, 1, 2]))
    rep = check_draft(d, sglang_version=V)
    assert rep.codes == [E.LAYER_INDEX] and "hidden_states[1, 2, 3]" in rep.errors[0].message


def test_default_ids_when_the_config_names_none(good, target, tmp_path):
    """No target_layer_ids: SGLang's build_target_layer_ids, one per draft layer (here 2 layers, K=3: fc says
    another K); a target too small for the rule is refused."""
    from malformed_drafts import edit_config

    d = tmp_path / "no_ids"
    __import__("shutil").copytree(good, d)
    edit_config(d, lambda c: c.update(dflash_config={"block_size": 8, "mask_token_id": 127}, num_target_layers=8))
    rep = check_draft(d, target, sglang_version=V)
    assert E.AUX_COUNT in rep.codes and any(p.warning and "target_layer_ids" in p.message for p in rep.problems)
    assert "num_hidden_layers=2" in next(p.message for p in rep.errors if p.code == E.AUX_COUNT)


def _one_layer_draft(d, num_target_layers):
    """The draft of a one-layer DFlash run on a 4-layer target: ids [0, 1, 2] (HF 1, 2, 3), as convert writes it."""
    from sglang_eagle3_ext.tiny.dflash_draft import dflash_draft_config, dflash_tensors, write_draft

    cfg = dflash_draft_config(vocab=4096, n_layers=1, mask_token_id=4095, num_target_layers=None)
    cfg["dflash_config"]["hf_hidden_state_indices"] = [1, 2, 3]
    if num_target_layers is not None:
        cfg["dflash_config"]["num_target_layers"] = num_target_layers
    return write_draft(d, cfg, dflash_tensors(cfg))


def test_ids_past_the_draft_layers_without_the_targets_count_are_refused_as_sglang_refuses(tmp_path):
    """No num_target_layers: SGLang 0.5.14/0.5.16's DFlashDraftModel bounds target_layer_ids by the draft's own
    num_hidden_layers and refuses id 1 of a one-layer draft at start-up (0.5.18+ bound them by max(ids) + 1);
    check says it in SGLang's words and, given the target, names the count to record."""
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    target = write_target_config(tmp_path / "target", hidden=64, vocab=4096, layers=4)
    d = _one_layer_draft(tmp_path / "d", None)
    for release in ("0.5.14", V):
        rep = check_draft(d, sglang_version=release)
        assert rep.codes == [E.LAYER_INDEX], rep.render()
        msg = rep.errors[0].message
        assert "target_layer_ids[1]=1, target_num_layers=1." in msg and "num_hidden_layers=1" in msg, msg
        assert "record dflash_config.num_target_layers" in msg, msg
        named = check_draft(d, target, sglang_version=release)
        assert named.codes == [E.LAYER_INDEX, E.LAYER_INDEX], named.render()
        assert "set dflash_config.num_target_layers=4 " in named.errors[1].message, named.render()
        _one_line(named)
    for release in ("0.5.18", "0.5.23"):
        assert not check_draft(d, target, sglang_version=release).errors, release
    assert check_draft(_one_layer_draft(tmp_path / "ok", 4), target, sglang_version=V).problems == []
    past = _one_layer_draft(tmp_path / "past", 2)
    for release in (V, "0.5.23"):  # a recorded count bounds the ids on every release
        rep = check_draft(past, sglang_version=release)
        assert rep.codes == [E.LAYER_INDEX] and "target_layer_ids[2]=2, target_num_layers=2." in str(rep.errors[0])


def test_a_recorded_target_layer_count_other_than_the_targets(good, target, tmp_path):
    """SGLang goes by the served target's num_hidden_layers and logs a recorded num_target_layers that differs:
    named ids are captured as they are (a warning: the trained layer numbers in another model's depth); without
    ids, its default ids over the served target are not those over the recorded count the draft was trained on."""
    from malformed_drafts import edit_config

    d = tmp_path / "six"
    __import__("shutil").copytree(good, d)
    edit_config(d, lambda c: c["dflash_config"].update(num_target_layers=6))
    rep = check_draft(d, target, sglang_version=V)
    assert not rep.errors and [p.code for p in rep.problems] == [E.TARGET_MISMATCH], rep.render()
    assert "num_target_layers=6" in rep.problems[0].message and "num_hidden_layers=8" in rep.problems[0].message
    edit_config(d, lambda c: c.update(dflash_config={"block_size": 8, "mask_token_id": 127, "num_target_layers": 6}))
    rep = check_draft(d, target, sglang_version=V)
    said = [p.message for p in rep.errors if p.code == E.LAYER_INDEX and "num_target_layers=6" in p.message]
    assert len(said) == 1 and "default ids [1, 5] for 8 layers, not [1, 3]" in said[0], rep.render()


def test_layer_ids_against_the_dumps(good, target, tmp_path):
    """check --data: the layers a server feeds the draft (ids + 1) must be the ones the dump captured."""
    from sglang_eagle3_ext.cli.check import main

    same = check_draft(good, target, sglang_version=V, captured=([1, 2, 3], "dump"))
    assert not same.errors, same.render()
    other = check_draft(good, target, sglang_version=V, captured=([2, 4, 6], "dump"))
    assert other.codes == [E.LAYER_INDEX] and "[1, 2, 3]" in other.errors[0].message
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_meta.json").write_text(json.dumps({"layer_indices_hf": [2, 4, 6]}))
    assert main([str(good), "--data", str(dump), "--sglang", V, "--quiet"]) == 1
    (dump / "dump_meta.json").write_text(json.dumps({"layer_indices_hf": [1, 2, 3]}))
    assert main([str(good), "--data", str(dump), "--sglang", V, "--quiet"]) == 0
    (dump / "dump_meta.json").unlink()
    with pytest.raises(Exception, match="records no target layers"):
        main([str(good), "--data", str(dump), "--sglang", V, "--quiet"])


def test_mask_token_within_the_targets_vocabulary(good, tmp_path):
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    small = write_target_config(tmp_path / "small", hidden=64, vocab=100, layers=8)
    rep = check_draft(good, small, sglang_version=V)
    assert E.MASK_TOKEN in rep.codes and "the target's vocab_size 100" in " ".join(map(str, rep.errors))


# The modules every layout goes through name no DFlash config field: the layout answers for it.
NEUTRAL = ("rules.py", "config_rules.py", "config_schema.py", "check.py", "convert.py", "convert_io.py", "keys.py")


@pytest.mark.parametrize("name", NEUTRAL)
def test_the_rules_name_no_dflash_field(name):
    text = (PKG / "draft" / name).read_text()
    text = text.replace(ast.get_docstring(ast.parse(text), clean=False) or "", "", 1)
    found = re.findall(r"(?i)dflash|block_size|mask_token|target_layer_ids", text)
    assert not found, f"draft/{name} names {found}"


# --- any DFlash config: a DraftSpec or named problems, never a crash ----------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_leaf = st.none() | st.booleans() | st.integers(-2, 140) | st.text(max_size=3)
_value = st.recursive(_leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=3), c, max_size=3))
_ids = st.lists(st.integers(-1, 9), min_size=0, max_size=4)
_dc = st.fixed_dictionaries(
    {},
    optional={
        "block_size": st.integers(-1, 17) | _value,
        "target_layer_ids": _ids | _value,
        "mask_token_id": st.integers(-1, 140) | _value,
        "num_target_layers": st.integers(0, 9) | _value,
        "hf_hidden_state_indices": _ids | _value,
        "conv_kernel_size": st.integers(0, 3),
    },
)
_cfg = st.fixed_dictionaries(
    {"architectures": st.just([dflash.ARCH])},
    optional={
        "hidden_size": st.sampled_from([32, 64]) | _value,
        "num_attention_heads": st.sampled_from([2, 4]),
        "num_key_value_heads": st.sampled_from([1, 2]),
        "intermediate_size": st.just(64),
        "vocab_size": st.sampled_from([100, 128]),
        "num_hidden_layers": st.integers(1, 5) | _value,
        "draft_vocab_size": st.sampled_from([64, 128]) | _value,
        "target_hidden_size": st.sampled_from([32, 64]),
        "block_size": st.integers(0, 9) | _value,
        "mask_token_id": st.integers(0, 140),
        "attention_bias": _value,
        "layer_types": _value,
        "dflash_config": _dc | _value,
    },
)


@settings(max_examples=200, deadline=None)
@given(cfg=_cfg, n_target=st.integers(1, 12))
def test_any_dflash_config_gives_a_spec_or_named_problems(cfg, n_target):
    from sglang_eagle3_ext.draft import keys, rules

    for version in ("0.5.10", "0.5.16"):
        spec, problems = rules.spec_from_config(cfg, keys.layout_for_version(version), where="c.json")
        assert all(p.message.startswith("c.json") and "\n" not in p.message for p in problems), problems
        if spec is None:
            assert [p for p in problems if not p.warning]
            continue
        assert spec.layout == "dflash" and spec.k >= 1
        assert all(all(isinstance(d, int) and d >= 0 for d in s) for s in rules.expected_shapes(spec).values())
        tp = rules.target_problems(spec, {"num_hidden_layers": n_target, "vocab_size": 128}, "c vs t")
        fed, _ = dflash.fed_layers(cfg, spec, n_target, keys.layout_for_version(version))
        if fed is not None and not any(p.code == E.LAYER_INDEX and not p.warning for p in problems + tp):
            assert all(1 <= i <= n_target - 1 for i in fed), (fed, tp)


def test_the_tiny_targets_dflash_draft_passes_against_it(tmp_path):
    """tiny/dflash_draft.py sizes a draft for the built-in tiny DeepSeek-V3 (4 layers: ids 0..2)."""
    from sglang_eagle3_ext.tiny.deepseek_v3 import TINY_CONFIG
    from sglang_eagle3_ext.tiny.dflash_draft import make_dflash_draft_for_tiny_target

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], **TINY_CONFIG}))
    d = make_dflash_draft_for_tiny_target(tmp_path / "draft", target)
    rep = check_draft(d, target, sglang_version=V, scan_values=False)
    assert not rep.errors, rep.render()
    info = describe_draft(d, V, target=target)
    assert info["k"] == 3 and info["hidden"] == TINY_CONFIG["hidden_size"] and info["hf_indices"] == [1, 2, 3]
    bad = make_dflash_draft_for_tiny_target(tmp_path / "bad", target, target_layer_ids=(1, 2, 3))
    assert check_draft(bad, target, sglang_version=V, scan_values=False).codes == [E.LAYER_INDEX]
