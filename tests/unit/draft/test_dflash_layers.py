"""The DFlash layer rules of draft/layers.py against each release's own code, and the dump capturing a DFlash
draft's layers: a DFlash id i is HF hidden_states[i + 1] (set_dflash_layers_to_capture, run from each release's
wheel), SGLang's default ids are its build_target_layer_ids (run from each wheel), `LAYOUT:N` in the dump's layers
variable resolves to them and is recorded as HF indices, and a release without DFlash is refused by name."""

from __future__ import annotations

import ast
import types
import zipfile
from typing import List, Optional  # the names SGLang's sources annotate with

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.compat import release as compat
from sglang_eagle3_ext.draft import layers as L
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.env_rules import DraftLayers
from sglang_eagle3_ext.versions import TESTED_RELEASES, capabilities_from_source

DS = "sglang/srt/models/deepseek_v2.py"
UTILS = "sglang/srt/speculative/dflash_utils.py"
DFLASH_MODEL = "sglang/srt/models/dflash.py"


def _wheel(release: str):
    from test_compat import WHEEL_DIRS as dirs  # SGE3_TEST_WHEEL_DIRS, read in one place

    wheel = compat.find_wheel(release, [*dirs, compat.cache_dir() / "wheels"])
    if wheel is None:
        pytest.skip(f"no SGLang {release} wheel here (compat --sglang {release} --download fetches it)")
    return wheel


def _function(source: str, name: str, owner: str | None = None):
    """The function `name` (a method of class `owner`) of a release's source, compiled on its own."""
    tree = ast.parse(source)
    scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner) if owner else tree
    fn = next(n for n in scope.body if isinstance(n, ast.FunctionDef) and n.name == name)
    ns = {"List": List, "Optional": Optional}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), f"<{name}>", "exec"), ns)  # SGLang's own function
    return ns[name]


@pytest.fixture(scope="module", params=list(TESTED_RELEASES))
def release(request, tmp_path_factory):
    """A release's capabilities and, where it has DFlash, its capture and default-id functions."""
    v = request.param
    root = tmp_path_factory.mktemp(f"sglang-{v}")
    with zipfile.ZipFile(_wheel(v)) as z:
        names = set(z.namelist())
        for rel in (DS, UTILS, DFLASH_MODEL):
            if rel in names:
                z.extract(rel, root)
    caps = capabilities_from_source(root / "sglang", v)
    out = types.SimpleNamespace(version=v, caps=caps, capture=None, default_ids=None)
    if caps.HAS_DFLASH:
        out.capture = _function((root / DS).read_text(), "set_dflash_layers_to_capture", "DeepseekV2ForCausalLM")
        out.default_ids = _function((root / UTILS).read_text(), "build_target_layer_ids")
    return out


def _captured(release, ids) -> list[int]:
    model = types.SimpleNamespace(
        pp_group=types.SimpleNamespace(is_last_rank=True), model=types.SimpleNamespace(layers_to_capture=[])
    )
    release.capture(model, ids)
    assert model.capture_aux_hidden_states is True
    return list(model.model.layers_to_capture)


def test_the_dflash_releases_are_the_capability_tables():
    from sglang_eagle3_ext.versions import capabilities_for_version

    assert [v for v in TESTED_RELEASES if capabilities_for_version(v).HAS_DFLASH] == [
        v for v in TESTED_RELEASES if v != "0.5.10"
    ]


def test_a_dflash_id_is_the_hf_index_before_it_on_every_release(release):
    if release.capture is None:
        pytest.skip(f"SGLang {release.version} has no DFlash")
    for hf in ([1], [2, 30, 58], [1, 2, 3], [3], list(range(1, 61))):
        ids = L.dflash_ids(hf)
        assert _captured(release, ids) == hf == L.dflash_capture(ids)


def test_the_default_ids_are_the_releases_own(release):
    if release.default_ids is None:
        pytest.skip(f"SGLang {release.version} has no DFlash")
    for n in range(1, 100):
        for k in range(1, 9):
            try:
                want = release.default_ids(n, k)
            except ValueError:
                want = None
            assert L.dflash_default_ids(n, k) == want, (n, k)


def test_dump_layers_for_a_dflash_draft_are_what_the_release_captures(release, tmp_path):
    """`dflash:K` in the dump's variable: the HF indices the release captures for a draft of K layers with no ids
    of its own; a release without DFlash is refused by its name, naming the variable."""
    cfg = C.DumpConfig(str(tmp_path), C.parse_layers("dflash:5"))
    if not release.caps.HAS_DFLASH:
        with pytest.raises(C.DumpConfigError, match=rf"{envs.DUMP_LAYERS}=dflash:5: SGLang {release.version} has no"):
            cfg.resolve_layers(61, None, lambda: release.caps)
        return
    got = cfg.resolve_layers(61, None, lambda: release.caps)
    assert got == _captured(release, release.default_ids(61, 5)) == [2, 16, 31, 45, 59]
    one = C.DumpConfig(str(tmp_path), C.parse_layers("dflash:1")).resolve_layers(4, None, lambda: release.caps)
    assert one == _captured(release, release.default_ids(4, 1)) == [3]  # the tiny target's one layer


def test_a_layout_form_is_checked_by_name_and_by_the_target(tmp_path):
    with pytest.raises(C.DumpConfigError, match=r"'eagle9' is not a draft layout; expected one of llama, mla"):
        C.DumpConfig(str(tmp_path), C.parse_layers("eagle9:1")).resolve_layers(61)
    with pytest.raises(C.DumpConfigError, match=r"dflash:2: SGLang's DFlash rule picks HF hidden_states \[2, 2\]"):
        C.DumpConfig(str(tmp_path), C.parse_layers("dflash:2")).resolve_layers(4)
    assert C.DumpConfig(str(tmp_path), C.parse_layers("llama:1")).resolve_layers(61) == L.default_layers(61)
    assert C.layers_text("dflash:3") == "dflash:3" and C.layers_text([2, 30]) == "2,30"
    with pytest.raises(C.DumpConfigError, match="dump_layers: 'nope' is not a draft layout"):
        C.layers_text("nope:3")


def test_a_preset_names_a_dflash_dump(tmp_path):
    from sglang_eagle3_ext.launch.presets import PresetError, ext_env

    assert ext_env({"dump_layers": "dflash:5"}, tmp_path)[envs.DUMP_LAYERS] == "dflash:5"
    with pytest.raises(PresetError, match="dump_layers"):
        ext_env({"dump_layers": "dflash:0"}, tmp_path)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="dflashm0123456789:, -_\u0661", max_size=12))
def test_any_layers_text_is_indices_a_layout_form_or_refused_by_name(text):
    """The variable is outside input: HF indices, LAYOUT:N with N >= 1, or an EnvError naming it."""
    try:
        v = envs.parse_layers(text, envs.DUMP_LAYERS)
    except envs.EnvError as e:
        assert str(e).startswith(f"{envs.DUMP_LAYERS}=")
        return
    if isinstance(v, DraftLayers):
        assert v.num_layers >= 1 and f"{v.layout}:{v.num_layers}" == text.strip()
    else:
        assert v is None or all(type(i) is int and i >= 0 for i in v)
