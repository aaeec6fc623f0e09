"""A preset's launcher settings (the `eagle3_ext:` keys that are LaunchOptions fields) are checked by their
flag's own declaration, and a preset `tune` writes is one launch's reader takes back (`--preset FILE`)."""

from __future__ import annotations

import pytest

from sglang_eagle3_ext.launch import preset_files, presets
from sglang_eagle3_ext.launch.options import PRESET_KEYS, LaunchOptions
from sglang_eagle3_ext.options.schema import flag_fields, flag_of
from sglang_eagle3_ext.tune import preset as tune_preset

FLAGS = {f.name: flag_of(f) for f in flag_fields(LaunchOptions)}


def _load(tmp_path, key, value: str):
    f = tmp_path / "p.yaml"
    f.write_text(f"model_path: /m\neagle3_ext:\n  {key}: {value}\n")
    return presets.load(path=f)


@pytest.mark.parametrize("key", PRESET_KEYS)
def test_a_launcher_key_takes_what_its_flag_takes(tmp_path, key):
    f = FLAGS[key]  # every launcher key of a preset is a flag of launch
    good = ["true", "false"] if f.action == "store_true" else [f"'{c}'" for c in f.choices]  # YAML: off is false
    for value in good:
        assert _load(tmp_path, key, value).ext[key] is not None
    for value in ["bogus", "5", "[pcie]", "{a: 1}"] + ([] if f.action == "store_true" else ["true"]):
        with pytest.raises(presets.PresetError) as e:
            _load(tmp_path, key, value)
        said = str(e.value)
        assert said.startswith(f"--config {tmp_path / 'p.yaml'}: eagle3_ext.{key}: expected "), said
        if f.choices is not None:
            assert ", ".join(f.choices) in said


def _tuned(tmp_path, **fields):
    draft = tmp_path / "draft"
    draft.mkdir(exist_ok=True)
    f = tune_preset.server_fields("builtin:tiny-deepseek-v3", str(draft), "triton", 3, 32)
    f.update(fields)
    h = tune_preset.header("band c<=4", "sglang-eagle3 tune --target T", ["c=4: 100.0 tok/s"], [])
    return tune_preset.write(tmp_path / "tuned-c4.yaml", f, h), f


def test_tune_leaves_no_preset_launch_would_refuse(tmp_path):
    """tune writes a preset only once launch's reader takes it back as written (test_tune.py: one it wrote plans)."""
    path, fields = _tuned(tmp_path)
    assert presets.load(path=path).server_args == fields and preset_files.preset(str(path)) == str(path)
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(RuntimeError, match="a bug"):
        _tuned(bad, speculative_draft_model_path="")  # launch: "must not be empty"
    assert list(bad.glob("tuned*")) == []
