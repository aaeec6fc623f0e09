"""Preset files (server_configs/ and the user's --config): every value is what its key needs, no key twice,
nothing silently dropped; each refusal names the file and the key."""

from __future__ import annotations

import json
import os

import pytest
from test_trust_launch import launch

from sglang_eagle3_ext.launch import presets


def _load_checked(tmp_path, text: str, parser=None):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    p = presets.load(path=f)
    presets.validate(p, p.server_args.keys() if parser is None else presets.server_args_fields()[0])
    if parser is not None:
        presets.check_values(p, parser)
    return p


BAD_EXT = {
    "empty dump_dir": ('dump_dir: ""', "dump_dir"),
    "blank dump_dir": ('dump_dir: "  "', "dump_dir"),
    "dump_dir a list": ("dump_dir: [a, b]", "dump_dir"),
    "dump_dir a mapping": ("dump_dir: {a: 1}", "dump_dir"),
    "dump_dir a number": ("dump_dir: 5", "dump_dir"),
    "layers a mapping": ("dump_layers: {a: 1}", "dump_layers"),
    "layers of strings": ("dump_layers: [a, b]", "dump_layers"),
    "sample rate above 1": ("dump_sample_rate: 2", "dump_sample_rate"),
    "sample rate a list": ("dump_sample_rate: [0.5]", "dump_sample_rate"),
    "encoding unknown": ("dump_encoding: fp4", "dump_encoding"),
    "responses a word": ("dump_responses: maybe", "dump_responses"),
    "profile a number": ("nccl_profile: 5", "nccl_profile"),
    "loopback a string": ("loopback_only: 'yes please'", "loopback_only"),
}


@pytest.mark.parametrize("name", list(BAD_EXT))
def test_bad_ext_values_are_refused_naming_file_and_key(tmp_path, name):
    line, key = BAD_EXT[name]
    with pytest.raises(presets.PresetError) as e:
        _load_checked(tmp_path, f"model_path: /m\neagle3_ext:\n  {line}\n")
    assert str(tmp_path / "p.yaml") in str(e.value) and key in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "text, key",
    [
        ("model_path: /m\nmodel_path: /other\n", "model_path"),
        ("model_path: /m\neagle3_ext:\n  dump_dir: /a\n  dump_dir: /b\n", "dump_dir"),
        ("model_path: /m\neagle3_ext: {}\neagle3_ext: {dump_dir: /d}\n", "eagle3_ext"),
    ],
)
def test_duplicate_keys_are_refused(tmp_path, text, key):
    with pytest.raises(presets.PresetError) as e:
        _load_checked(tmp_path, text)
    msg = str(e.value)
    assert "duplicate" in msg and key in msg and str(tmp_path / "p.yaml") in msg and "line" in msg


@pytest.mark.parametrize(
    "text, key",
    [
        ("model_path: /m\neagle3_ext: []\n", "eagle3_ext"),
        ("model_path: /m\neagle3_ext: off\n", "eagle3_ext"),
        ("model_path: /m\n1: 2\n", "1"),
        ("model_path: 2024-01-01\n", "model_path"),
        ("model_path: ''\n", "model_path"),
        ("model_path: /m\nchat_template: [[a]]\n", "chat_template"),
    ],
)
def test_structure_and_scalar_types_are_checked_without_sglang(tmp_path, text, key):
    with pytest.raises(presets.PresetError) as e:
        _load_checked(tmp_path, text)
    assert key in str(e.value) and str(tmp_path / "p.yaml") in str(e.value)


def test_a_preset_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(presets.PresetError, match="regular file"):
        presets.load(path=fifo)


def test_good_ext_values_still_work(tmp_path):
    p = _load_checked(
        tmp_path,
        "model_path: /m\neagle3_ext:\n  dump_dir: d\n  dump_layers: [2, 3]\n"
        "  dump_sample_rate: 0.25\n  dump_responses: false\n  nccl_profile: pcie\n"
        "  loopback_only: true\n  dump_encoding: FP8\n",
    )
    env = presets.ext_env(p.ext, base_dir=tmp_path)
    assert env["SGLANG_EAGLE3_EXT_DUMP_DIR"] == str(tmp_path / "d")
    assert env["SGLANG_EAGLE3_EXT_DUMP_LAYERS"] == "2,3"
    assert float(env["SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE"]) == 0.25
    from sglang_eagle3_ext import envs

    assert envs.get(envs.DUMP_RESPONSES, env) is False and envs.get(envs.DUMP_ENCODING, env) == "fp8"


@pytest.mark.sglang
@pytest.mark.parametrize(
    "line, key",
    [
        ("tp_size: [1, 2]", "tp_size"),
        ("tp_size: 1.5", "tp_size"),
        ("tp_size: true", "tp_size"),
        ("mem_fraction_static: abc", "mem_fraction_static"),
        ("attention_backend: nope", "attention_backend"),
        ("cuda_graph_bs_decode: []", "cuda_graph_bs_decode"),
        ("cuda_graph_bs_decode: [1, [2]]", "cuda_graph_bs_decode"),
        ("json_model_override_args: [1]", "json_model_override_args"),
        ("disable_radix_cache: 1", "disable_radix_cache"),
        ("dtype: {a: 1}", "dtype"),
    ],
)
def test_server_args_values_are_checked_against_sglangs_flags(tmp_path, line, key):
    parser = presets.sglang_parser()
    with pytest.raises(presets.PresetError) as e:
        _load_checked(tmp_path, f"model_path: /m\n{line}\n", parser)
    assert key in str(e.value) and str(tmp_path / "p.yaml") in str(e.value), str(e.value)


@pytest.mark.sglang
def test_good_server_args_values_pass(tmp_path):
    """Accepted, and SGLang's own parser reads back exactly the values written."""
    parser = presets.sglang_parser()
    p = _load_checked(
        tmp_path,
        "model_path: /m\ntp_size: 2\nmem_fraction_static: 0.5\n"
        "cuda_graph_bs_decode: [1, 2, 4]\njson_model_override_args: {a: 1}\n"
        "disable_radix_cache: false\nattention_backend: triton\nrevision: null\n",
        parser,
    )
    ns = parser.parse_args(presets.to_cli_args(p.server_args, parser))
    assert (ns.model_path, ns.tp_size, ns.mem_fraction_static, ns.attention_backend) == ("/m", 2, 0.5, "triton")
    assert list(ns.cuda_graph_bs_decode) == [1, 2, 4] and not ns.disable_radix_cache
    assert json.loads(ns.json_model_override_args) == {"a": 1}
    for name in presets.available_presets():
        shipped = presets.load(name)
        presets.check_values(shipped, parser)
        ns = parser.parse_args(["--model-path", "/m", *presets.to_cli_args(shipped.server_args, parser)])
        for dest, value in shipped.server_args.items():
            if value is not None and dest != "model_path" and hasattr(ns, dest):
                assert getattr(ns, dest) == value or list(getattr(ns, dest) or []) == value, (name, dest)


@pytest.mark.sglang
@pytest.mark.parametrize(
    "text, key",
    [
        ("model_path: /m\ntp_size: [1, 2]\n", "tp_size"),
        ("model_path: /m\nmodel_path: /n\n", "model_path"),
        ("model_path: /m\neagle3_ext:\n  dump_dir: ''\n", "dump_dir"),
    ],
)
def test_the_launcher_refuses_with_exit_2_naming_file_and_key(tmp_path, capsys, text, key):
    cfg = tmp_path / "user.yaml"
    cfg.write_text(text)
    rc, _, err = launch(tmp_path, "--config", str(cfg), capsys=capsys)
    assert rc == 2 and str(cfg) in err and key in err, err
    assert "Traceback" not in err


@pytest.mark.sglang
def test_a_preset_file_is_taken_by_preset_as_by_config(tmp_path, capsys):
    """`--preset FILE` (a preset `tune` wrote) serves as `--config FILE` does; a missing file is named once."""
    mine = tmp_path / "tuned.yaml"
    mine.write_text(presets.find_preset("tiny").read_text())
    rc, out, err = launch(tmp_path, "--preset", str(mine), capsys=capsys)
    assert rc == 0, err
    assert str(mine) in out, out
    rc, _, err = launch(tmp_path, "--preset", str(tmp_path / "gone.yaml"), capsys=capsys)
    assert rc == 2 and err.count(str(tmp_path / "gone.yaml")) == 1 and "no such file" in err, err
