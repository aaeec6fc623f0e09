"""The patch table's rows are checked when they register: each kind of bad row is refused in one line naming the
patch and the member at fault, and every shipped row conforms (its wrapper imported here, not at registration)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from sglang_eagle3_ext import patching
from sglang_eagle3_ext.patch_table import FEATURES, HOOKS, PATCHES, PatchRefused, PatchSpec, register

ROW = PATCHES[0]  # draft.strict_load: LlamaForCausalLMEagle3.load_weights, hooks/llama_eagle3.py


def _refusal(*rows: PatchSpec) -> str:
    with pytest.raises(PatchRefused) as ei:
        register(*rows)
    msg = str(ei.value)
    assert "\n" not in msg and f"patch {rows[-1].name!r}" in msg, msg
    return msg


def test_every_shipped_row_conforms_and_its_wrapper_is_a_wrapt_function():
    assert register(*PATCHES) == PATCHES
    for spec in PATCHES:
        assert spec.wrapper == f"{HOOKS}.{spec.module.rpartition('.')[2]}:{spec.hook}"
        fn = patching.import_string(spec.wrapper)  # the hook module imports no SGLang at its top (test_lazy_imports)
        assert list(inspect.signature(fn).parameters) == ["wrapped", "instance", "args", "kwargs"], spec.name
        assert spec.feature in FEATURES


def test_a_taken_name_is_refused():
    other = dataclasses.replace(PATCHES[1], name=ROW.name)
    assert "name: taken" in _refusal(ROW, other)


@pytest.mark.parametrize(
    "target",
    [
        "sglang.srt.models.llama_eagle3.LlamaForCausalLMEagle3.load_weights",  # no ':'
        "sglang.srt.models.llama_eagle3:load_weights",  # module-level: compat finds only class members
        "sglang.srt.models.llama_eagle3:LlamaForCausalLMEagle3.",
    ],
)
def test_a_target_not_spelt_module_colon_class_attr_is_refused(target):
    assert f"target {target!r}" in _refusal(dataclasses.replace(ROW, target=target))


def test_an_unknown_feature_is_refused():
    assert "feature 'dumps'" in _refusal(dataclasses.replace(ROW, feature="dumps"))


def test_a_misspelt_capability_flag_is_refused():
    assert "requires 'HAS_MLA_DRAF'" in _refusal(dataclasses.replace(ROW, requires="HAS_MLA_DRAF"))


def test_a_hook_function_its_module_lacks_is_refused():
    msg = _refusal(dataclasses.replace(ROW, hook="strict_load_weight"))
    assert "hook 'strict_load_weight'" in msg and "in_server/hooks/llama_eagle3.py" in msg


def test_a_target_module_without_a_hook_module_is_refused():
    msg = _refusal(dataclasses.replace(ROW, target="sglang.srt.models.no_such_model:Model.load_weights"))
    assert "no in_server/hooks/no_such_model.py" in msg


def test_a_wrapper_spelt_as_module_and_function_is_refused():
    hook = f"{HOOKS}.llama_eagle3:strict_load_weights"
    assert f"hook {hook!r} is no function name" in _refusal(dataclasses.replace(ROW, hook=hook))


def test_two_sglang_modules_on_one_hook_module_are_refused():
    other = dataclasses.replace(ROW, name="draft.other", target="sglang.srt.other.llama_eagle3:Other.load_weights")
    assert "already hooks sglang.srt.models.llama_eagle3" in _refusal(ROW, other)


def test_a_name_not_feature_dot_what_is_refused():
    assert "name 'StrictLoad'" in _refusal(dataclasses.replace(ROW, name="StrictLoad"))


def test_params_not_a_tuple_of_names_is_refused():
    assert "params 'weights'" in _refusal(dataclasses.replace(ROW, params="weights"))
