"""Presets: shipped files validate against the real ServerArgs, and become the arguments SGLang parses."""

from __future__ import annotations

import dataclasses

import pytest

from sglang_eagle3_ext.launch import presets


def test_shipped_presets_are_found():
    names = presets.available_presets()
    for n in (
        "tiny",
        "tiny-dump",
        "kimi-k25-eagle3-tp8-pcie",
        "kimi-k25-eagle3-tp8-nvlink",
        "kimi-k25-dump-tp8-pcie",
        "kimi-k25-dump-tp8-nvlink",
        "deepseek-v3-eagle3-tp8-nvlink",
    ):
        assert n in names


def test_ext_section_becomes_env(tmp_path):
    p = presets.load("tiny-dump")
    env = presets.ext_env(p.ext, base_dir=tmp_path)
    assert env == {"SGLANG_EAGLE3_EXT_DUMP_DIR": str(tmp_path / "dumps"), "SGLANG_EAGLE3_EXT_DUMP_LAYERS": "1,2,3"}
    assert presets.ext_env({"dump_layers": "2, 30,58"})["SGLANG_EAGLE3_EXT_DUMP_LAYERS"] == "2,30,58"


def test_unknown_ext_key_is_refused(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("model_path: m\neagle3_ext:\n  dump_dirs: /d\n")
    with pytest.raises(presets.PresetError, match="did you mean 'dump_dir'"):
        presets.validate(presets.load(path=f), ["model_path"])


def test_builtin_names():
    assert presets.builtin_model_name("builtin:tiny-deepseek-v3") == "tiny-deepseek-v3"
    assert presets.builtin_model_name("/models/x") is None
    with pytest.raises(presets.PresetError, match="builtin:tiny-deepseek-v3"):
        presets.builtin_model_name("builtin:huge")


@pytest.mark.sglang
@pytest.mark.parametrize("name", presets.available_presets())
def test_shipped_presets_validate_and_parse(name):
    fields, version = presets.server_args_fields()
    p = presets.load(name)
    presets.validate(p, fields, version)
    parser = presets.sglang_parser()
    ns = presets.quiet_parse(parser, presets.to_cli_args(p.server_args, parser))
    for k, v in p.server_args.items():
        if k == "model_path":
            continue
        got = getattr(ns, k)
        assert got == v or str(got) == str(v), (k, got, v)


@pytest.mark.sglang
def test_unknown_key_suggests_the_nearest_server_args_field(tmp_path):
    fields, version = presets.server_args_fields()
    f = tmp_path / "p.yaml"
    f.write_text("model_path: m\nmem_fraction_statik: 0.5\n")
    with pytest.raises(presets.PresetError) as e:
        presets.validate(presets.load(path=f), fields, version)
    assert "did you mean 'mem_fraction_static'" in str(e.value) and version in str(e.value)
    f.write_text("model_path: m\nzzzz_qqqq: 1\n")
    with pytest.raises(presets.PresetError, match="unknown key"):
        presets.validate(presets.load(path=f), fields, version)


@pytest.mark.sglang
def test_to_cli_args_kinds_and_user_dests():
    parser = presets.sglang_parser()
    args = presets.to_cli_args(
        {
            "tp_size": 2,
            "disable_radix_cache": True,
            "enable_two_batch_overlap": False,
            "json_model_override_args": {"a": 1},
            "cuda_graph_bs_decode": [1, 2, 4],
        },
        parser,
    )
    ns = presets.quiet_parse(parser, ["--model-path", "m", *args])
    assert ns.tp_size == 2 and ns.disable_radix_cache and not ns.enable_two_batch_overlap
    assert ns.json_model_override_args == '{"a": 1}' and [int(x) for x in ns.cuda_graph_bs_decode] == [1, 2, 4]
    with pytest.raises(presets.PresetError, match="switch"):
        presets.to_cli_args({"disable_radix_cache": "yes"}, parser)
    # abbreviations and --x=v resolve to the real dests
    assert presets.user_dests(parser, ["--tp", "2", "--mem-fraction-static=0.4"]) == {"tp_size", "mem_fraction_static"}
    assert parser.parse_args(["--model-path", "m"]).tp_size == 1  # defaults restored after user_dests


def test_wheel_ships_presets():
    """pyproject force-includes server_configs into the package; presets.preset_dirs looks there first."""
    from pathlib import Path

    import tomllib

    root = Path(presets.__file__).resolve().parents[2]
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    fi = cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert fi.get("server_configs") == "sglang_eagle3_ext/server_configs"
    assert dataclasses.is_dataclass(presets.Preset)


def test_bad_yaml_and_unreadable_config_are_one_line_errors(tmp_path):
    """A preset file that is not YAML, or not a file, gets one line naming it (no raw yaml dump)."""
    from sglang_eagle3_ext.launch.presets import PresetError, load

    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\nb: 2\n")
    with pytest.raises(PresetError) as e:
        load(path=bad)
    assert "\n" not in str(e.value) and str(bad) in str(e.value) and "line 3" in str(e.value)
    with pytest.raises(PresetError) as e:
        load(path=tmp_path)
    assert "\n" not in str(e.value) and "cannot be read" in str(e.value)
