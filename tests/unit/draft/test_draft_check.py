"""Offline rules: key mapping per release, safetensors header parsing, convert and check CLIs.

No SGLang import here: every call names the release (--sglang-version), as on a machine without it.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft import keys
from sglang_eagle3_ext.draft.arch import llama
from sglang_eagle3_ext.draft.check import check_draft
from sglang_eagle3_ext.draft.convert import convert
from sglang_eagle3_ext.draft.safetensors_io import read_header, scan_headers

pytest.importorskip("speculators")
AUX = (1, 4, 6)  # HF hidden_states indices (speculators convention) for an 8-layer target


@pytest.fixture(scope="module")
def spec_draft(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return make_speculators_draft(tmp_path_factory.mktemp("d") / "spec", aux_ids=AUX)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    return write_target_config(tmp_path_factory.mktemp("t") / "target")


@pytest.fixture(scope="module")
def good(spec_draft, tmp_path_factory):
    return convert(spec_draft, tmp_path_factory.mktemp("c") / "conv", sglang_version="0.5.16", log=lambda *_: None)


def test_canonical_names_and_release_names():
    assert keys.canonical("model.midlayer.self_attn.q_proj.weight")[0] == "layers.0.self_attn.q_proj.weight"
    assert keys.canonical("draft_model.layers.0.mlp.up_proj.weight")[0] == "layers.0.mlp.up_proj.weight"
    assert keys.canonical("aux_norm_mid.weight")[0] == "fc_norm.1.weight"
    old, new = keys.layout_for_version("0.5.10"), keys.layout_for_version("0.5.16")
    assert llama.to_release("layers.0.hidden_norm.weight", old)[0] == "midlayer.hidden_norm.weight"
    assert llama.to_release("layers.0.hidden_norm.weight", new)[0] == "layers.0.hidden_norm.weight"
    assert llama.to_release("layers.1.hidden_norm.weight", old)[1].code == E.UNSUPPORTED_BY_RELEASE
    assert llama.to_release("fc_norm.0.weight", old)[1].code == E.UNSUPPORTED_BY_RELEASE
    assert llama.to_release("input_norm.weight", new)[1].code == E.UNSUPPORTED_BY_RELEASE
    assert llama.to_release("input_norm.weight", keys.layout_for_version("0.5.18"))[0] == "input_norm.weight"


@pytest.mark.parametrize(
    "version,hf,ids,warns",
    [
        ("0.5.10", [3, 31, 59], [2, 30, 58], False),  # release adds 1 to every id
        ("0.5.16", [3, 31, 59], [3, 31, 59], False),  # taken as-is
        ("0.5.16", [1, 31, 59], [1, 31, 59], True),  # +1 because ids[0]==1: only exact with our patch
    ],
)
def test_release_aux_ids(version, hf, ids, warns):
    got, warn = keys.release_aux_ids(hf, keys.layout_for_version(version))
    assert got == ids and bool(warn) == warns


def test_header_parser_matches_safetensors(good):
    from safetensors import safe_open

    tensors, problems = read_header(good / "model.safetensors")
    assert not problems
    with safe_open(str(good / "model.safetensors"), "pt") as f:
        assert {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()} == {k: v.shape for k, v in tensors.items()}


def test_header_parser_rejects_garbage(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    assert read_header(p)[1][0].code == E.BAD_FILE
    p.write_bytes(struct.pack("<Q", 5) + b"{nope")
    assert read_header(p)[1][0].code == E.BAD_FILE


def test_convert_speculators_for_each_layout(spec_draft, tmp_path):
    for version, layer_prefix in (("0.5.10", "midlayer."), ("0.5.16", "layers.0.")):
        out = convert(spec_draft, tmp_path / version, sglang_version=version, log=lambda *_: None)
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
        assert cfg["draft_vocab_size"] == 64 and cfg["target_hidden_size"] == 64
        ec = cfg["eagle_config"]
        assert ec[keys.HF_INDICES_FIELD] == list(AUX) and ec["use_aux_hidden_state"] is True
        names, _ = scan_headers(out)
        assert any(n.startswith(layer_prefix) for n in names)
        assert "embed_tokens.weight" not in names  # SGLang takes the target's
        rep = check_draft(out, sglang_version=version)
        assert not rep.errors, rep.render()


def test_convert_refuses_norm_before_residual(tmp_path):
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    src = make_speculators_draft(tmp_path / "nbr", aux_ids=AUX, norm_before_residual=True)
    with pytest.raises(E.ConversionRefused) as ei:
        convert(src, tmp_path / "out", sglang_version="0.5.16")
    assert ei.value.codes == [E.UNSUPPORTED_OPTION]
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_convert_refuses_fc_norm_on_old_release(tmp_path):
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    src = make_speculators_draft(tmp_path / "fcn", aux_ids=AUX, fc_norm=True)
    with pytest.raises(E.ConversionRefused) as ei:
        convert(src, tmp_path / "out", sglang_version="0.5.10")
    assert E.UNSUPPORTED_BY_RELEASE in ei.value.codes
    out = convert(src, tmp_path / "ok", sglang_version="0.5.16", log=lambda *_: None)
    assert "fc_norm.0.weight" in scan_headers(out)[0]


def test_check_flags_raw_speculators_checkpoint(spec_draft):
    rep = check_draft(spec_draft, sglang_version="0.5.16")
    assert rep.codes == [E.CONFIG_INVALID] and "convert" in rep.errors[0].message


def test_malformed_variants_each_give_their_own_code(good, target, tmp_path):
    from malformed_drafts import MALFORMED, TARGET_OVERRIDES, make_variant

    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    seen = {}
    for name in MALFORMED:
        code, d = make_variant(good, name, tmp_path / name)
        tgt = write_target_config(tmp_path / f"t_{name}", **TARGET_OVERRIDES.get(name, {}))
        rep = check_draft(d, target=tgt, sglang_version="0.5.16", scan_values=True)
        assert code in rep.codes, f"{name}: {rep.render()}"
        seen[name] = code
        err = next(p for p in rep.errors if p.code == code)
        assert str(d) in err.message or str(tgt) in err.message, err  # names the file
    assert len(set(seen.values())) == len(MALFORMED) == 12


def test_nan_found_by_default_and_headers_only_says_so(good, tmp_path):
    from malformed_drafts import make_variant

    _, d = make_variant(good, "nan_weight", tmp_path / "nan")
    assert E.NON_FINITE in check_draft(d, sglang_version="0.5.16").codes
    fast = check_draft(d, sglang_version="0.5.16", scan_values=False)  # headers only: cannot see values
    assert not fast.errors and "values not scanned" in fast.render()


def test_check_cli_exit_codes(good, tmp_path):
    from malformed_drafts import make_variant

    ok = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.check", str(good), "--sglang-version", "0.5.16"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    _, bad = make_variant(good, "fc_1xH", tmp_path / "bad")
    r = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.check", str(bad), "--sglang-version", "0.5.16"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "[fc-unfused]" in r.stdout and "fc.weight is [64, 64]" in r.stdout


def test_convert_cli(spec_draft, tmp_path):
    argv = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext.convert",
        str(spec_draft),
        str(tmp_path / "o"),
        "--sglang-version",
        "0.5.10",
    ]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "model.safetensors").exists()
    r2 = subprocess.run(argv, capture_output=True, text=True)  # the same again: the output folder exists now
    assert r2.returncode != 0 and "--force" in r2.stderr


def test_dtype_follows_weights_and_mismatch_with_target_is_caught(tmp_path):
    """Seen on the GPU host: a draft config without torch_dtype runs in float16 under --dtype auto while the
    bf16 target sends bf16 states -> the first request dies in a matmul. convert records the weights' dtype;
    check names the mismatch."""
    import torch

    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft, write_target_config

    bf16_target = write_target_config(tmp_path / "t", torch_dtype="bfloat16")
    src = make_speculators_draft(tmp_path / "s", aux_ids=AUX, dtype=torch.bfloat16)
    conv = convert(src, tmp_path / "c", sglang_version="0.5.16", log=lambda *_: None)
    cfg = json.loads((conv / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16"
    assert E.DTYPE not in check_draft(conv, target=bf16_target, sglang_version="0.5.16").codes
    del cfg["torch_dtype"], cfg["dtype"]
    (conv / "config.json").write_text(json.dumps(cfg))
    rep = check_draft(conv, target=bf16_target, sglang_version="0.5.16")
    err = next(p for p in rep.errors if p.code == E.DTYPE)
    assert "float16" in err.message and "bfloat16" in err.message and "torch_dtype" in err.message
