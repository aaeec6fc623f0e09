"""The patch table against the real installed SGLang: apply, idempotence, revert, listing."""

from __future__ import annotations

import importlib

import pytest
import wrapt

import sglang_eagle3_ext as ext
from sglang_eagle3_ext import patching
from sglang_eagle3_ext.patch_table import PatchSpec

pytestmark = pytest.mark.sglang
ALL = {"draft", "dump"}


def _rows():
    """The rows this release can carry: a row whose capability the release lacks (e.g. the MLA draft class before
    0.5.14) is never applied (patching.selected) and is tested by compat as 'skipped'."""
    return patching.selected(ALL)


def _current(spec):
    owner, attr = patching.resolve_target(spec)
    return owner.__dict__[attr]


@pytest.fixture
def clean():
    ext.revert()
    yield
    ext.revert()


def test_every_target_resolves_on_installed_release(clean):
    for spec in _rows():
        owner, attr = patching.resolve_target(spec)
        assert callable(getattr(owner, attr)), spec.target


def test_apply_wraps_real_classes_and_lists_them(clean):
    originals = {s.name: _current(s) for s in _rows()}
    applied = ext.apply(ALL)
    assert sorted(applied) == sorted(s.name for s in _rows())
    assert sorted(ext.applied_patches()) == sorted(applied)
    for s in _rows():
        cur = _current(s)
        assert isinstance(cur, wrapt.FunctionWrapper), s.target
        assert cur.__wrapped__ is originals[s.name]
    # the class SGLang's registry hands out is the patched one
    from sglang.srt.models.registry import ModelRegistry

    cls = ModelRegistry.resolve_model_cls(["LlamaForCausalLMEagle3"])[0]
    assert isinstance(cls.__dict__["load_weights"], wrapt.FunctionWrapper)


def test_second_apply_is_a_noop(clean):
    ext.apply(ALL)
    first = {s.name: _current(s) for s in _rows()}
    assert ext.apply(ALL) == []
    for s in _rows():
        assert _current(s) is first[s.name]  # identity: not wrapped twice
        assert not isinstance(_current(s).__wrapped__, wrapt.FunctionWrapper)


def test_revert_restores_originals_and_reapply_works(clean):
    originals = {s.name: _current(s) for s in _rows()}
    ext.apply(ALL)
    assert sorted(ext.revert()) == sorted(originals)
    assert ext.applied_patches() == []
    for s in _rows():
        assert _current(s) is originals[s.name]
    assert len(ext.apply(ALL)) == len(_rows())  # instrument -> uninstrument -> instrument


def test_features_select_patches(clean):
    ext.apply({"draft"})
    assert all(n.startswith(("draft.", "target.")) for n in ext.applied_patches())
    assert not any(n.startswith("dump.") for n in ext.applied_patches())


def test_missing_target_names_target_and_version(clean):
    from sglang_eagle3_ext.versions import installed_version

    bogus = PatchSpec(
        "test.bogus",
        "sglang.srt.models.llama_eagle3:LlamaForCausalLMEagle3.no_such_method",
        "strict_load_weights",
        "test",
        feature="draft",
    )
    with pytest.raises(patching.PatchTargetMissing) as ei:
        patching.apply_spec(bogus)
    msg = str(ei.value)
    assert "LlamaForCausalLMEagle3.no_such_method" in msg and installed_version() in msg
    missing_mod = PatchSpec(
        "test.mod", "sglang.srt.models.no_such_module:X.y", "strict_load_weights", "test", feature="draft"
    )
    with pytest.raises(patching.PatchTargetMissing, match="no_such_module"):
        patching.apply_spec(missing_mod)


def test_wrapped_method_still_calls_through(clean):
    """A patched method is still the method: bound, and reaches the original."""
    ext.apply(ALL)
    mod = importlib.import_module("sglang.srt.models.deepseek_v2")
    fn = mod.DeepseekV2ForCausalLM.__dict__["set_eagle3_layers_to_capture"]
    assert fn.__wrapped__.__name__ == "set_eagle3_layers_to_capture"
