"""Bad draft inputs are bad input, never "a bug": `check` and `convert` answer a malformed config.json,
safetensors header, index or pickle with exit 1 (check's verdict; 2 for a config.json it cannot read) or 2
(convert's refusal) and one message
naming the file and key; nothing hangs on a FIFO, nothing is written outside the output. No SGLang import."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct

import pytest

from sglang_eagle3_ext.cli.common import run_tool

pytest.importorskip("speculators")
torch = pytest.importorskip("torch")
V = "0.5.16"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("inputs")
    return convert(
        make_speculators_draft(root / "spec", aux_ids=(1, 4, 6)), root / "good", sglang_version=V, log=lambda *_: None
    )


@contextlib.contextmanager
def deadline(seconds=120):
    """A read that blocks (a FIFO) fails the test instead of hanging it (generous: a busy machine is slow, a
    blocked read is forever)."""

    def boom(*_):
        raise TimeoutError("blocked reading a draft input")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check(capsys, draft, *extra):
    from sglang_eagle3_ext.cli.check import main

    with deadline():
        rc = run_tool("check", main, [str(draft), "--sglang", V, *map(str, extra)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "a bug" not in out.err, out.err
    return rc, out.out + out.err


def convert_cli(capsys, src, dst, *extra):
    from sglang_eagle3_ext.cli.convert import main

    with deadline():
        rc = run_tool("convert", main, [str(src), str(dst), "--sglang", V, "--quiet", *extra])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "a bug" not in out.err, out.err
    assert {p.name for p in dst.parent.iterdir()} <= {src.name, dst.name}, "wrote outside its output"
    return rc, out.out + out.err


def _copy(good, d, edit_cfg=None):
    shutil.copytree(good, d)
    if edit_cfg is not None:
        cfg = json.loads((d / "config.json").read_text())
        cfg = edit_cfg(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def _set(key, value):
    def f(c):
        c[key] = value
        return c

    return f


CONFIGS = {
    "architectures_int": (_set("architectures", 5), "'architectures'"),
    "zero_heads": (_set("num_attention_heads", 0), "'num_attention_heads': must be >= 1"),
    "hidden_string": (_set("hidden_size", "64"), "'hidden_size': expected an integer"),
    "flag_string": (_set("tie_word_embeddings", "false"), "'tie_word_embeddings': expected true/false"),
    "top_level_list": (lambda c: [c], "expected a JSON object"),
    "eagle_config_list": (_set("eagle_config", [1, 2]), "'eagle_config': expected an object"),
    "bool_layer_ids": (
        lambda c: {**c, "eagle_config": {**c["eagle_config"], "eagle_aux_hidden_state_layer_ids": [True, 4, 6]}},
        "eagle_aux_hidden_state_layer_ids",
    ),
    "draft_vocab_string": (_set("draft_vocab_size", "64"), "'draft_vocab_size'"),
    "missing_keys": (lambda c: {"architectures": c["architectures"]}, "`hidden_size` missing"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_config_is_a_verdict_in_check_and_a_refusal_in_convert(capsys, good, tmp_path, name):
    edit, words = CONFIGS[name]
    d = _copy(good, tmp_path / "src", edit)
    rc, out = check(capsys, d)
    assert rc == 1 and words in out and "config.json" in out, out
    rc, out = convert_cli(capsys, d, tmp_path / "out")
    assert rc == 2 and ("config.json" in out or name == "missing_keys"), out


def test_non_draft_folder_is_named_in_one_line(capsys, tmp_path):
    from safetensors.torch import save_file

    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["DeepseekV3ForCausalLM"],
                "model_type": "deepseek_v3",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "vocab_size": 128,
                "intermediate_size": 128,
                "num_hidden_layers": 4,
            }
        )
    )
    save_file(
        {f"model.layers.{i}.mlp.{n}.weight": torch.zeros(4, 4) for i in range(4) for n in ("up", "down")},
        str(d / "model.safetensors"),
    )
    rc, out = check(capsys, d)
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert rc == 1 and len(errors) == 1, out
    assert "this is a DeepseekV3ForCausalLM model, not an EAGLE-3 draft" in errors[0]


def _header_file(path, header, data=b""):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


HEADERS = {
    "dtype_list": {"fc.weight": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}},
    "shape_negative": {"fc.weight": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}},
    "shape_bool": {"fc.weight": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}},
    "offsets_three": {"fc.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}},
    "entry_string": {"fc.weight": "F32"},
    "deep_nesting": b"[" * 100_000 + b"]" * 100_000,
    "not_utf8": b"\xff\xfe{}",
    "offsets_overlap": {
        "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
    },
}


@pytest.mark.parametrize("name", sorted(HEADERS) + ["huge_length", "truncated", "directory", "fifo"])
def test_bad_safetensors_file_is_reported_not_crashed(capsys, good, tmp_path, name):
    d = _copy(good, tmp_path / "src")
    f = d / "model.safetensors"
    f.unlink()
    if name in HEADERS:
        _header_file(f, HEADERS[name], b"\0" * 8)
    elif name == "huge_length":
        f.write_bytes(struct.pack("<Q", 2**63) + b"{}")
    elif name == "truncated":
        f.write_bytes(b"\x01\x02")
    elif name == "directory":
        f.mkdir()
    else:
        os.mkfifo(f)
    rc, out = check(capsys, d)
    assert rc == 1 and "[bad-safetensors]" in out and str(f) in out, out
    rc, out = convert_cli(capsys, d, tmp_path / "out")
    assert rc == 2 and "model.safetensors" in out, out


@pytest.mark.parametrize(
    "weight_map", [["model.safetensors"], {"fc.weight": "../model.safetensors"}, {"fc.weight": 5}, "x"]
)
def test_bad_index_is_reported(capsys, good, tmp_path, weight_map):
    d = _copy(good, tmp_path / "src")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    rc, out = check(capsys, d)
    assert rc == 1 and "[bad-safetensors]" in out and "index" in out, out


@pytest.mark.parametrize("dtype", [torch.float16, torch.float8_e4m3fn])
def test_d2t_of_a_float_dtype_is_refused(capsys, good, tmp_path, dtype):
    from safetensors.torch import load_file, save_file

    d = _copy(good, tmp_path / "src")
    t = load_file(str(d / "model.safetensors"))
    t["d2t"] = t["d2t"].to(dtype)
    save_file(t, str(d / "model.safetensors"))
    rc, out = check(capsys, d)
    assert rc == 1 and "[d2t-range]" in out and "integer offsets" in out, out


def test_config_fifo_does_not_block(capsys, good, tmp_path):
    d = _copy(good, tmp_path / "src")
    (d / "config.json").unlink()
    os.mkfifo(d / "config.json")
    rc, out = check(capsys, d)
    assert rc == 2 and "FIFO" in out, out  # a config that cannot be read: bad input, not a verdict


def test_bad_target_flag_names_the_flag(capsys, good, tmp_path):
    rc, out = check(capsys, good, "--target", tmp_path / "nowhere")
    assert rc == 2 and "--target" in out, out


# --- pickles (convert --allow-pickle) ---------------------------------------------------------------


def _pickle_src(good, d, payload=None, raw: bytes | None = None):
    from safetensors.torch import load_file

    _copy(good, d)
    sd = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    if raw is not None:
        (d / "pytorch_model.bin").write_bytes(raw)
    else:
        torch.save(payload(sd) if payload else sd, d / "pytorch_model.bin")
    return d


PICKLES = {
    "a_list": (lambda sd: list(sd.values()), "holds a list"),
    "nested": (lambda sd: {"model": sd}, "'model'"),
    "int_keys": (lambda sd: {i: v for i, v in enumerate(sd.values())}, "is not a string"),
    "complex": (lambda sd: {**sd, "fc.weight": torch.zeros(2, dtype=torch.complex64)}, "complex64"),
}


@pytest.mark.parametrize("name", sorted(PICKLES) + ["truncated", "garbage"])
def test_bad_pickle_is_refused_naming_the_file(capsys, good, tmp_path, name):
    if name in PICKLES:
        src = _pickle_src(good, tmp_path / "src", PICKLES[name][0])
        words = PICKLES[name][1]
    else:
        src = _pickle_src(good, tmp_path / "src")
        data = (src / "pytorch_model.bin").read_bytes()
        (src / "pytorch_model.bin").write_bytes(data[: len(data) // 2] if name == "truncated" else b"\x80\x05garbage")
        words = "not a readable torch checkpoint"
    rc, out = convert_cli(capsys, src, tmp_path / "out", "--allow-pickle")
    assert rc == 2 and "pytorch_model.bin" in out and words in out, out


def test_pickle_with_tied_tensors_converts(capsys, good, tmp_path):
    """Two names sharing one storage (tied weights) are legal in a state dict; safetensors needs them apart."""

    def tie(sd):
        sd["layers.0.post_attention_layernorm.weight"] = sd["layers.0.input_layernorm.weight"]
        return sd

    src = _pickle_src(good, tmp_path / "src", tie)
    rc, out = convert_cli(capsys, src, tmp_path / "out", "--allow-pickle")
    assert rc == 0, out
    rc, out = check(capsys, tmp_path / "out")
    assert rc == 0, out
