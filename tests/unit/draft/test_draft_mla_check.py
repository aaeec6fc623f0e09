"""Offline: MLA (Kimi-K2.5) drafts in `check`, `convert`, the launcher's pre-check and `describe_draft`; hub-id
drafts from the local HF cache; `convert --force` never deletes the source; safetensors offsets as safetensors
validates them. No SGLang import: every call names the release."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import pytest

from sglang_eagle3_ext.boundary import BadInput
from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft.arch import mla
from sglang_eagle3_ext.draft.check import check_draft, describe_draft
from sglang_eagle3_ext.draft.convert import convert
from sglang_eagle3_ext.draft.safetensors_io import read_header, scan_headers

torch = pytest.importorskip("torch")
V = "0.5.16"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    return make_mla_draft(tmp_path_factory.mktemp("mla") / "good", aux_ids=(2, 4, 6))


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.22", "0.5.23"])
def test_mla_draft_ok_on_releases_with_the_class(good, version):
    rep = check_draft(good, sglang_version=version, scan_values=True)
    assert not rep.errors, rep.render()
    assert rep.draft_class == mla.ARCH and mla.ARCH in rep.render()
    assert mla.Q_HALF in rep.loads and mla.KV_HALF in rep.loads


def test_mla_draft_refused_clearly_before_the_class_existed(good):
    rep = check_draft(good, sglang_version="0.5.10")
    assert rep.codes == [E.DRAFT_CLASS] and ">= 0.5.14" in rep.errors[0].message


def test_eagle31_mla_draft_ok(tmp_path):
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    d = make_mla_draft(tmp_path / "g31", fc_norm=True, norm_output=True)
    rep = check_draft(d, sglang_version=V, scan_values=True)
    assert not rep.errors and {"fc_norm.0.weight", "fc_norm.2.weight"} <= set(rep.loads)
    info = describe_draft(d, V)
    assert info["fc_norm"] and info["norm_output"] and info["layout"] == "mla" and info["k"] == 3


def test_mla_variants_each_give_their_own_precise_error(good, tmp_path):
    from malformed_drafts import MLA_MALFORMED, make_mla_variant

    words = {}
    for name in MLA_MALFORMED:
        code, d = make_mla_variant(good, name, tmp_path / name)
        rep = check_draft(d, sglang_version=V, scan_values=True)
        assert code in rep.codes, f"{name}: {rep.render()}"
        words[name] = next(p.message.split(": ", 1)[-1] for p in rep.errors if p.code == code)
    assert len(set(words.values())) == len(MLA_MALFORMED)
    assert "kv_a_proj_with_mqa" in words["missing_kv_a_half"] and "2 x hidden" in words["q_a_proj_1xH"]
    assert "qk_rope_head_dim=8" in words["wrong_rope_dim"] and "kv_lora_rank=16" in words["wrong_lora_dim"]


def test_describe_draft_names_the_class(good, tmp_path):
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    info = describe_draft(good, V)
    assert info["draft_class"] == mla.ARCH and info["ok"] and info["aux_ids"] == [2, 4, 6]
    pytest.importorskip("speculators")
    llama = convert(
        make_speculators_draft(tmp_path / "s", aux_ids=(1, 4, 6)), tmp_path / "c", sglang_version=V, log=lambda *_: None
    )
    info = describe_draft(llama, V)
    assert (
        info["draft_class"] == "LlamaForCausalLMEagle3"
        and info["hf_indices"] == [1, 4, 6]
        and info["layout"] == "llama"
    )


# --- convert ------------------------------------------------------------------------------------------


def test_convert_sglang_layout_records_hf_indices(good, tmp_path):
    out = convert(good, tmp_path / "o", sglang_version=V, hf_indices=[2, 4, 6], log=lambda *_: None)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == [mla.ARCH] and cfg["eagle_config"]["hf_hidden_state_indices"] == [2, 4, 6]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6] and cfg["torch_dtype"] == "bfloat16"
    assert not check_draft(out, sglang_version=V).errors


def test_convert_specforge_mla_layout(good, tmp_path):
    """SpecForge's MLA draft: class DeepseekV3ForCausalLMEagle3 (unknown to SGLang), `midlayer.*` keys."""
    from malformed_drafts import edit_mla

    sf = tmp_path / "sf"
    shutil.copytree(good, sf)

    def keys_(t):
        for k in [k for k in t if k.startswith("layers.0.")]:
            t["midlayer." + k[len("layers.0.") :]] = t.pop(k)

    def cfg_(c):
        c["architectures"] = ["DeepseekV3ForCausalLMEagle3"]
        del c["eagle_config"]

    edit_mla(sf, keys_, cfg_)
    assert E.CONFIG_INVALID in check_draft(sf, sglang_version=V).codes  # as published: SGLang cannot build it
    with pytest.raises(E.ConversionRefused, match="--hf-indices"):
        convert(sf, tmp_path / "no_idx", sglang_version=V)
    out = convert(sf, tmp_path / "o", sglang_version=V, hf_indices=[2, 4, 6], log=lambda *_: None)
    assert not check_draft(out, sglang_version=V).errors
    assert mla.Q_HALF in scan_headers(out)[0]


def test_convert_splits_a_prefused_projection(good, tmp_path):
    from malformed_drafts import make_mla_variant
    from safetensors.torch import load_file

    _, pf = make_mla_variant(good, "prefused_qkv_a", tmp_path / "pf")
    out = convert(pf, tmp_path / "o", sglang_version=V, hf_indices=[2, 4, 6], log=lambda *_: None)
    a, b = load_file(str(good / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert torch.equal(a[mla.Q_HALF], b[mla.Q_HALF]) and torch.equal(a[mla.KV_HALF], b[mla.KV_HALF])
    assert mla.FUSED_KEY not in b


def test_convert_refuses_mla_for_release_without_the_class(good, tmp_path):
    with pytest.raises(E.ConversionRefused) as ei:
        convert(good, tmp_path / "o", sglang_version="0.5.10", hf_indices=[2, 4, 6])
    assert ei.value.codes == [E.DRAFT_CLASS] and not (tmp_path / "o").exists()


# --- convert --force never deletes the source or foreign data (#16 item 3) -------------------------------


def test_force_never_deletes_a_dir_containing_the_source(good, tmp_path):
    root = tmp_path / "models"
    src = root / "draft"
    shutil.copytree(good, src)
    (root / "other_model.txt").write_text("precious")
    for dst in (src, root):
        with pytest.raises(BadInput, match="contains the source draft"):
            convert(src, dst, sglang_version=V, hf_indices=[2, 4, 6], force=True)
    assert (src / "model.safetensors").exists() and (root / "other_model.txt").read_text() == "precious"


def test_force_replaces_only_a_previous_output(good, tmp_path):
    out = convert(good, tmp_path / "o", sglang_version=V, hf_indices=[2, 4, 6], log=lambda *_: None)
    convert(good, out, sglang_version=V, hf_indices=[2, 4, 6], force=True, log=lambda *_: None)  # ours: replaced
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(BadInput, match="not a previous output of convert"):
        convert(good, foreign, sglang_version=V, hf_indices=[2, 4, 6], force=True)
    other = tmp_path / "other_draft"
    shutil.copytree(good, other)  # a draft, but not written by convert
    with pytest.raises(BadInput, match="not a previous output of convert"):
        convert(good, other, sglang_version=V, hf_indices=[2, 4, 6], force=True)
    assert (foreign / "notes.txt").read_text() == "keep" and (other / "model.safetensors").exists()


# --- safetensors offsets validated like safetensors (#16 item 4) -----------------------------------------


def _st_file(path, entries, data_len):
    header = json.dumps({n: {"dtype": "F32", "shape": [s], "data_offsets": [b, e]} for n, s, b, e in entries}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_len)
    return path


@pytest.mark.parametrize(
    "name,entries,data_len,ok",
    [
        ("contiguous", [("a", 2, 0, 8), ("b", 2, 8, 16)], 16, True),
        ("overlap", [("a", 2, 0, 8), ("b", 2, 4, 12)], 16, False),
        ("gap", [("a", 2, 0, 8), ("b", 2, 12, 20)], 20, False),
        ("not_from_zero", [("a", 2, 4, 12)], 12, False),
        ("trailing_bytes", [("a", 2, 0, 8)], 12, False),
        ("reversed", [("a", 0, 8, 8), ("b", 2, 0, 8)], 8, True),
    ],
)
def test_offsets_validated_exactly_like_safetensors(tmp_path, name, entries, data_len, ok):
    from safetensors import safe_open

    p = _st_file(tmp_path / f"{name}.safetensors", entries, data_len)
    try:
        with safe_open(str(p), "pt") as f:
            list(f.keys())
        theirs = True
    except Exception:  # noqa: BLE001 - safetensors' own verdict
        theirs = False
    tensors, problems = read_header(p)
    assert theirs == ok and (not problems) == ok, (problems, theirs)
    if not ok:
        assert problems[0].code == E.BAD_FILE and str(p) in problems[0].message


def test_check_reports_overlapping_offsets(good, tmp_path):
    d = tmp_path / "overlap"
    shutil.copytree(good, d)
    _st_file(d / "extra.safetensors", [("a", 2, 0, 8), ("b", 2, 4, 12)], 16)
    rep = check_draft(d, sglang_version=V)
    assert E.BAD_FILE in rep.codes and "overlaps the previous tensor" in rep.render()


# --- hub ids: local HF cache only ------------------------------------------------------------------------


def _fake_cache(cache, repo_id, src):
    snap = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "0123abcd"
    shutil.copytree(src, snap)
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("0123abcd")
    return snap


def test_hub_id_checked_from_local_cache(good, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snap = _fake_cache(tmp_path / "hub", "kimi/k25-eagle3-mla", good)
    rep = check_draft("kimi/k25-eagle3-mla", sglang_version=V)
    assert rep.checked and not rep.errors and str(snap) in rep.note and rep.draft_class == mla.ARCH
    from sglang_eagle3_ext.server.runtime import read_config

    assert read_config("kimi/k25-eagle3-mla")["architectures"] == [mla.ARCH]  # the serving process reads it too
    assert read_config("kimi/not-downloaded") is None
    rep = check_draft("kimi/not-downloaded", sglang_version=V)
    assert not rep.checked and "NOT checked" in rep.note and "hf download kimi/not-downloaded" in rep.note

    from sglang_eagle3_ext.launch.draft_precheck import precheck

    d = precheck("EAGLE3", "kimi/not-downloaded", None, V)
    assert d.value == "skipped" and "NOT checked" in d.reason
    d = precheck("EAGLE3", "kimi/k25-eagle3-mla", None, V)
    assert d.value == "passed" and mla.ARCH in d.reason and "local cache" in d.reason


def test_check_cli_on_uncached_hub_id_says_not_checked(tmp_path):
    env = {**__import__("os").environ, "HF_HUB_CACHE": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.check", "org/absent-draft", "--sglang-version", V],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2 and "NOT checked" in r.stdout and "hf download org/absent-draft" in r.stdout


def test_precheck_mla_draft_names_the_class(good, tmp_path):
    from sglang_eagle3_ext.launch.draft_precheck import DraftCheckFailed, precheck
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    target = write_target_config(tmp_path / "t", torch_dtype="bfloat16")
    d = precheck("EAGLE3", str(good), str(target), V)
    assert d.value == "passed" and f"SGLang builds {mla.ARCH}" in d.reason
    with pytest.raises(DraftCheckFailed, match="draft-class-unsupported"):
        precheck("EAGLE3", str(good), str(target), "0.5.10")


def test_convert_cli_refuses_dst_holding_the_source_in_one_line(good, tmp_path):
    src = tmp_path / "models" / "draft"
    shutil.copytree(good, src)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_eagle3_ext.convert",
            str(src),
            str(tmp_path / "models"),
            "--sglang-version",
            V,
            "--hf-indices",
            "2,4,6",
            "--force",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "contains the source draft" in r.stderr and "Traceback" not in r.stderr
    assert (src / "model.safetensors").exists()
