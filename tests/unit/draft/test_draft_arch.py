"""Draft layouts are packages listed in one registry (`draft/arch`): a config naming a layout the registry does not
know is refused naming the known ones; a new layout is one folder plus one registry line, refused when it registers
unless it conforms (every member of `Layout`, of its kind, and its roles), and `check` and `convert` go through it;
the layout-neutral modules name no layout. No SGLang import for the rules: every call names the release."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
import types
from pathlib import Path

import pytest

from sglang_eagle3_ext.boundary import BadInput
from sglang_eagle3_ext.draft import arch as layouts
from sglang_eagle3_ext.draft import errors as E

pytest.importorskip("speculators")
V = "0.5.16"
PKG = Path(__file__).resolve().parents[3] / "sglang_eagle3_ext"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("arch")
    return convert(
        make_speculators_draft(root / "spec", aux_ids=(1, 4, 6)), root / "good", sglang_version=V, log=lambda *_: None
    )


def _with_architectures(src: Path, dst: Path, archs: list[str]) -> Path:
    shutil.copytree(src, dst)
    (dst / ".sglang-eagle3-output.json").unlink(missing_ok=True)  # a copy the user edited, not convert's output
    cfg = json.loads((dst / "config.json").read_text())
    cfg["architectures"] = archs
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _third_layout(name: str, arch: str, monkeypatch) -> types.ModuleType:
    """A Llama-shaped layout under another class name (an EAGLE-3.1 variant, P-EAGLE): the package a new layout is,
    its network role Llama's."""
    from sglang_eagle3_ext.draft.arch import llama
    from sglang_eagle3_ext.draft.arch.llama import net

    mod = types.ModuleType(f"third_layout_{name}")
    monkeypatch.setitem(sys.modules, f"{mod.__name__}.net", net)
    mod.__dict__.update({k: v for k, v in vars(llama).items() if not k.startswith("__")})
    mod.NAME, mod.ARCH, mod.LABEL = name, arch, "P-EAGLE"
    mod.SGLANG_CLASS = f"sglang.srt.models.p_eagle:{arch}"
    mod.SOURCE_NAMES = (f"{arch} (P-EAGLE)",)
    mod.READERS = {}
    mod.source_format = lambda cfg: name if arch in (cfg.get("architectures") or []) else None
    return mod


def test_registry_lists_each_layout_and_finds_it_from_a_config():
    from sglang_eagle3_ext.draft.arch import dflash, llama, mla

    assert layouts.names() == ("llama", "mla", "dflash")
    assert layouts.get("llama") is llama and layouts.get("mla") is mla and layouts.get("dflash") is dflash
    assert layouts.layout_of({"architectures": [dflash.ARCH]}) is dflash
    assert layouts.layout_of({"architectures": [mla.ARCH]}) is mla
    assert layouts.layout_of({"architectures": ["Other", llama.ARCH]}) is llama
    assert layouts.find({"architectures": 5}) is None and layouts.find([]) is None


@pytest.mark.parametrize("cfg", [{"architectures": ["PEagleForCausalLM"]}, {"architectures": []}, {}, [1]])
def test_unknown_layout_is_refused_naming_the_known_ones(cfg):
    from sglang_eagle3_ext.draft.arch import llama, mla

    with pytest.raises(BadInput) as ei:
        layouts.layout_of(cfg, where="draft/config.json")
    msg = str(ei.value)
    assert msg.startswith("draft/config.json: ") and "no EAGLE-3 draft layout" in msg
    assert all(w in msg for w in ("llama", llama.ARCH, "mla", mla.ARCH)), msg
    with pytest.raises(BadInput, match="known layouts: llama .*, mla "):
        layouts.get("p-eagle")


def test_check_refuses_an_unknown_layout_naming_the_known_ones(good, tmp_path):
    from sglang_eagle3_ext.draft.arch import dflash, llama, mla
    from sglang_eagle3_ext.draft.check import check_draft

    d = _with_architectures(good, tmp_path / "unknown", ["PEagleForCausalLMEagle3"])
    rep = check_draft(d, sglang_version=V)
    assert rep.codes == [E.CONFIG_INVALID] and rep.draft_class is None
    assert f'["{llama.ARCH}"], ["{mla.ARCH}"] (MLA) or ["{dflash.ARCH}"] (DFlash)' in rep.errors[0].message


def test_a_third_layout_is_one_package_and_one_registry_line(good, tmp_path, monkeypatch):
    from sglang_eagle3_ext.draft.check import check_draft, describe_draft
    from sglang_eagle3_ext.draft.convert import convert

    third = _third_layout("p-eagle", "PEagleForCausalLMEagle3", monkeypatch)
    d = _with_architectures(good, tmp_path / "third", [third.ARCH])
    before = check_draft(d, sglang_version=V)
    assert before.codes == [E.CONFIG_INVALID]
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    layouts.register(third)
    rep = check_draft(d, sglang_version=V)
    assert not rep.errors, rep.render()
    assert rep.draft_class == third.ARCH and rep.loads == check_draft(good, sglang_version=V).loads
    assert (
        'PEagleForCausalLMEagle3"] (P-EAGLE)'
        in check_draft(_with_architectures(good, tmp_path / "fourth", ["Nope"]), sglang_version=V).errors[0].message
    )
    info = describe_draft(d, V)
    assert info["layout"] == third.NAME and info["ok"] and info["k"] == 3
    out = convert(d, tmp_path / "converted", sglang_version=V, log=lambda *_: None)
    assert json.loads((out / "config.json").read_text())["architectures"] == [third.ARCH]
    assert not check_draft(out, sglang_version=V).errors


def test_each_registered_layout_conforms_and_its_roles_resolve():
    from sglang_eagle3_ext.training.routes import plan_step, train_entry

    for name in layouts.names():
        mod = layouts.get(name)
        assert layouts.problems(mod) == [] and mod.NAME == name and mod.SGLANG_CLASS.endswith(f":{mod.ARCH}")
        assert isinstance(layouts.net(mod), type)  # eval's network class (its net.py)
        assert callable(train_entry(mod)) and callable(plan_step(mod))  # training/<ROUTE>/{train,plan}.py


def _missing(member):
    def without(mod):
        delattr(mod, member)

    return without


def _set(member, value):
    return lambda mod: setattr(mod, member, value)


NONCONFORMING = {
    "no heldout": _missing("heldout"),
    "no ROUTE": _missing("ROUTE"),
    "HOLDS_VOCAB is str, not bool": _set("HOLDS_VOCAB", "yes"),
    "LABEL is int, not str | None": _set("LABEL", 3),
    "layer_shapes is dict, not Callable": _set("layer_shapes", {}),
    "no split_fused (it has FUSED entries)": _set("FUSED", {"fused.weight": ("a.weight", "b.weight")}),
    "ROUTE 'nowhere': no training/nowhere/train.py": _set("ROUTE", "nowhere"),
}


@pytest.mark.parametrize("why", list(NONCONFORMING))
def test_registration_refuses_a_layout_that_does_not_conform_naming_what_it_lacks(why, monkeypatch):
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    third = _third_layout("p-eagle", "PEagleForCausalLMEagle3", monkeypatch)
    NONCONFORMING[why](third)
    with pytest.raises(layouts.LayoutRefused) as ei:
        layouts.register(third)
    msg = str(ei.value)
    head, _, lacks = msg.partition(" does not conform: ")
    assert "\n" not in msg and head == "draft layout 'p-eagle' (third_layout_p-eagle)" and why in lacks.split("; "), msg
    assert "p-eagle" not in layouts.names()


def test_registration_refuses_a_layout_folder_without_its_network(monkeypatch):
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    third = _third_layout("p-eagle", "PEagleForCausalLMEagle3", monkeypatch)
    monkeypatch.delitem(sys.modules, f"{third.__name__}.net")
    with pytest.raises(layouts.LayoutRefused, match=r"no third_layout_p-eagle\.net module"):
        layouts.register(third)
    assert layouts.register(_third_layout("p-eagle", "PEagleForCausalLMEagle3", monkeypatch)).NAME in layouts.names()


def test_a_declaration_imports_nothing_heavy_nor_above_the_draft():
    src = "\n".join(p.read_text() for p in (PKG / "draft" / "arch").rglob("*.py") if p.name != "net.py")
    assert "import torch" not in src and "...training" not in src and "import speculators" not in src


def test_layout_classes_exist_where_they_are_named():
    pytest.importorskip("sglang")
    for name in layouts.names():
        mod = layouts.get(name)
        module, cls = mod.SGLANG_CLASS.split(":")
        spec = importlib.util.find_spec(module)
        assert spec is not None and f"class {cls}" in Path(spec.origin).read_text(), mod.SGLANG_CLASS


# The modules every layout goes through: a layout is named in its own module and the registry only.
# acceptance/ and refresh/ whole; training/ but for the routes themselves (its mla/ and speculators/ folders,
# plan_models) and init_from's per-route readers.
NEUTRAL = (
    "draft/rules.py",
    "draft/config_rules.py",
    "in_server/draft/loader.py",
    "draft/keys.py",
    "draft/config_schema.py",
    "draft/check.py",
    "draft/convert.py",
    "draft/convert_io.py",
    "cli/check.py",
    "cli/convert.py",
    *sorted(str(p.relative_to(PKG)) for d in ("acceptance", "refresh") for p in (PKG / d).glob("*.py")),
    *(
        f"training/{m}.py"
        for m in (
            "train",
            "plan",
            "options",
            "data",
            "samples",
            "loader",
            "sharding",
            "checkpoint",
            "distributed",
            "report",
            "workers",
            "target_view",
        )
    ),
)


@pytest.mark.parametrize("path", NEUTRAL)
def test_layout_neutral_modules_name_no_layout(path):
    import ast

    text = (PKG / path).read_text()
    doc = ast.get_docstring(ast.parse(text), clean=False) or ""  # a command's help may name the layouts it reads
    text = text.replace(doc, "", 1)
    named = sorted(
        {
            m.group(0)
            for m in re.finditer(
                r"(?i)\bmla\b|Eagle3DeepseekV2|DeepseekV3ForCausalLMEagle3|"
                r"q_a_proj|kv_a_proj",
                text,
            )
        }
    )
    assert not named, f"{path} names a layout: {named}"


# --- any config: a layout or a refusal naming the known ones; the rules of that layout never crash ---------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_leaf = st.none() | st.booleans() | st.integers(-3, 96) | st.floats(allow_nan=False) | st.text(max_size=4)
_value = st.recursive(
    _leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=8
)
_ARCHS = [
    "LlamaForCausalLMEagle3",
    "Eagle3DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLMEagle3",
    "LlamaForCausalLM",
    "Eagle3Speculator",
    "PEagleForCausalLM",
]
_FIELDS = [
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "num_hidden_layers",
    "draft_vocab_size",
    "target_hidden_size",
    "num_aux_hidden_states",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "fc_norm",
    "norm_output",
    "norm_before_fc",
    "tie_word_embeddings",
    "eagle_config",
    "head_dim",
    "num_key_value_heads",
]
_SMALL = st.integers(1, 8).map(lambda i: 8 * i)


@settings(max_examples=150, deadline=None)
@given(
    archs=st.lists(st.sampled_from(_ARCHS) | _value, max_size=3) | _value,
    fields=st.dictionaries(st.sampled_from(_FIELDS), _SMALL | _value, max_size=12),
    ids=st.none() | st.lists(st.integers(0, 9), min_size=1, max_size=4),
)
def test_any_config_gets_its_layout_or_a_named_refusal(archs, fields, ids):
    from sglang_eagle3_ext.draft import keys, rules
    from sglang_eagle3_ext.draft.config_schema import type_problems
    from sglang_eagle3_ext.draft.convert import convert_config

    cfg = {**fields, "architectures": archs}
    if ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    try:
        mod = layouts.layout_of(cfg)
    except BadInput as e:
        assert "known layouts: llama" in str(e)
    else:
        assert mod.ARCH in archs
    for version in ("0.5.10", "0.5.16"):
        release = keys.layout_for_version(version)
        spec, problems = rules.spec_from_config(cfg, release)
        assert spec is not None or [p for p in problems if not p.warning]
        if spec is not None:
            assert all(all(isinstance(d, int) for d in s) for s in rules.expected_shapes(spec).values())
        found = layouts.find(cfg)
        if type_problems(cfg, "c", found.CONFIG_FIELDS if found else ()):
            continue  # convert refuses these before reading them (source_config)
        try:
            out, _, _ = convert_config(cfg, release)
        except E.ConversionRefused as e:
            assert e.problems and str(e).startswith("convert: ")
        else:
            assert layouts.find(out) is not None
