"""Kimi-K2.5's MLA EAGLE-3 drafts (`Eagle3DeepseekV2ForCausalLM`) against the real SGLang class on CPU:
strict loading, every tensor and parameter accounted for, the fc width guard, and the same verdicts
from `check`. Also: a Llama draft missing lm_head is refused, one sharing the target's is not."""

from __future__ import annotations

import json
import logging
import shutil
import types

import pytest
import torch
from helpers import LLAMA, build_draft, checkpoint_tensors, load_draft, release_with, target_config

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft.arch import mla

pytestmark = pytest.mark.sglang
MLA_NAMES = [
    "missing_lm_head",
    "missing_kv_a_half",
    "q_a_proj_1xH",
    "fc_1xH",
    "unknown_key",
    "nan_weight",
    "wrong_k",
    "wrong_rope_dim",
    "wrong_lora_dim",
    "prefused_qkv_a",
]


has_mla = release_with("HAS_MLA_DRAFT", mla.ARCH)
target_dir = target_config()


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    return make_mla_draft(tmp_path_factory.mktemp("mla") / "good", aux_ids=(2, 4, 6))


@pytest.fixture(scope="module")
def good31(tmp_path_factory):
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    return make_mla_draft(
        tmp_path_factory.mktemp("mla31") / "good31", aux_ids=(2, 4, 6), fc_norm=True, norm_output=True, seed=1
    )


def assert_every_parameter_from_checkpoint(model, ckpt):
    """Each parameter equals the checkpoint tensor(s) it came from: fused q/kv_a, stacked gate/up, the rest 1:1."""
    a, m = "layers.0.self_attn.", "layers.0.mlp."
    fused = {
        "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight": torch.cat([ckpt[mla.Q_HALF], ckpt[mla.KV_HALF]]),
        "model.midlayer.mlp.gate_up_proj.weight": torch.cat([ckpt[m + "gate_proj.weight"], ckpt[m + "up_proj.weight"]]),
    }
    seen = set()
    for name, p in model.named_parameters():
        if name in fused:
            want = fused[name]
        elif name == "model.embed_tokens.weight":
            continue  # SGLang replaces it with the target's (target_hidden_size == hidden_size)
        else:
            key = name.removeprefix("model.").replace("midlayer.", "layers.0.")
            want = ckpt[key]
            seen.add(key)
        torch.testing.assert_close(p.data.float(), want.float(), rtol=0, atol=0, msg=name)
    assert {
        k
        for k in ckpt
        if k not in (mla.Q_HALF, mla.KV_HALF, "d2t", "t2d") and "gate_proj" not in k and "up_proj" not in k
    } == seen
    hot = ckpt["d2t"] + torch.arange(ckpt["d2t"].shape[0])
    assert torch.equal(model.hot_token_id.cpu(), hot)
    attn = model.model.midlayer.self_attn
    assert attn.w_kc is not None and attn.w_vc is not None  # the release's post-load kv_b_proj split ran
    n = model.config.num_attention_heads
    kv_b = ckpt[a + "kv_b_proj.weight"].float().unflatten(0, (n, -1))
    torch.testing.assert_close(attn.w_kc.float(), kv_b[:, : attn.qk_nope_head_dim], rtol=0, atol=0)


def test_mla_draft_loads_every_tensor(has_mla, good, target_dir):
    model = load_draft(has_mla, good, target_dir, mla.ARCH)
    assert type(model).__name__ == mla.ARCH
    assert_every_parameter_from_checkpoint(model, checkpoint_tensors(good))
    assert model.model.fc.weight.shape == (64, 3 * 64)
    assert model.model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight.shape[1] == 2 * 64


def test_eagle31_mla_draft_loads_fc_norm_and_norm_output(has_mla, good31, target_dir):
    model = load_draft(has_mla, good31, target_dir, mla.ARCH)
    assert_every_parameter_from_checkpoint(model, checkpoint_tensors(good31))
    assert len(model.model.fc_norm) == 3 and model.model.norm_output is True


def test_mla_draft_sharing_the_targets_lm_head_loads(has_mla, good, target_dir, tmp_path):
    """draft_vocab_size null: SGLang takes lm_head (and embeddings) from the target -- not a missing weight."""
    from malformed_drafts import edit_mla

    d = tmp_path / "shared_head"
    shutil.copytree(good, d)

    def drop(t):
        for k in ("lm_head.weight", "d2t", "t2d"):
            t.pop(k)

    edit_mla(d, drop, lambda c: c.__setitem__("draft_vocab_size", None))
    model = load_draft(has_mla, d, target_dir, mla.ARCH)
    assert model.load_lm_head_from_target is True


@pytest.fixture(scope="module")
def variants(good, tmp_path_factory):
    from malformed_drafts import make_mla_variant

    root = tmp_path_factory.mktemp("mla_variants")
    return {n: make_mla_variant(good, n, root / n) for n in MLA_NAMES}


@pytest.mark.parametrize("name", MLA_NAMES)
def test_malformed_mla_variant_refused_by_loader_and_check(has_mla, variants, name, target_dir):
    from sglang_eagle3_ext.draft.check import check_draft

    code, d = variants[name]
    with pytest.raises(E.DraftLoadError) as ei:
        load_draft(has_mla, d, target_dir, mla.ARCH)
    assert code in ei.value.codes, str(ei.value)
    loader_msg = next(p.message for p in ei.value.problems if p.code == code)
    rep = check_draft(d, target=target_dir, scan_values=True)
    assert code in rep.codes, rep.render()
    check_msg = next(p.message for p in rep.errors if p.code == code)
    assert loader_msg.split(": ", 1)[-1][:40] == check_msg.split(": ", 1)[-1][:40], (loader_msg, check_msg)


def test_mla_variants_distinct(variants):
    """Eight codes for the eight acceptance cases; the two dims variants and the pre-fused one differ in words."""
    from sglang_eagle3_ext.draft.check import check_draft

    codes = {n: variants[n][0] for n in MLA_NAMES[:8]}
    assert len(set(codes.values())) == 8
    msgs = set()
    for n in MLA_NAMES:
        rep = check_draft(variants[n][1], sglang_version="0.5.16", scan_values=True)
        msgs.add(next(p.message.split(": ", 1)[-1] for p in rep.errors if p.code == variants[n][0]))
    assert len(msgs) == len(MLA_NAMES)


def test_unpatched_mla_release_loads_silently(has_mla, variants, caplog):
    """Why the patch exists: SGLang alone loads a draft missing lm_head / one fused half without a word."""
    import sglang_eagle3_ext
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    sglang_eagle3_ext.revert()
    try:
        for name, missing in (("missing_lm_head", "lm_head"), ("missing_kv_a_half", "kv_a_proj_with_mqa")):
            d = variants[name][1]
            model = build_draft(d, mla.ARCH)
            caplog.clear()
            with caplog.at_level(logging.INFO):
                model.load_weights(sglang_weights_iterator(d))  # no error raised: the silence the patch ends
            said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
            assert not [m for m in said if missing in m], f"{name}: SGLang named it: {said}"
    finally:
        sglang_eagle3_ext.apply(["draft"])


# --- fc width guard on the MLA model ------------------------------------------------------------------


def _batch(mode, width, rows=4):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    hs = torch.empty(rows, width, device="meta")
    return types.SimpleNamespace(
        forward_mode=getattr(ForwardMode, mode), spec_info=types.SimpleNamespace(hidden_states=hs)
    )


def test_mla_guard_refuses_unfused_target_states(has_mla, good, target_dir):
    from sglang_eagle3_ext.in_server.draft.guard import check_width

    model = load_draft(has_mla, good, target_dir, mla.ARCH)
    with pytest.raises(E.DraftWidthError) as ei:  # through the patched real Eagle3MLAModel.forward
        model.model.forward(torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long), _batch("EXTEND", 64))
    assert ei.value.codes == [E.FC_WIDTH] and "192 = K(3) x target hidden(64)" in str(ei.value)
    assert check_width(model.model, _batch("DECODE", 64)) is None
    assert check_width(model.model, _batch("EXTEND", 192)) is None


# --- Llama drafts: missing parameters are errors, SGLang's sharing rules respected -------------------------


@pytest.fixture(scope="module")
def llama_draft(ext, tmp_path_factory):
    pytest.importorskip("speculators")
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("llama")
    return convert(make_speculators_draft(root / "spec", aux_ids=(2, 4, 6)), root / "conv", log=lambda *_: None)


def test_llama_draft_missing_lm_head_refused(ext, llama_draft, target_dir, tmp_path):
    from malformed_drafts import edit_tensors

    from sglang_eagle3_ext.draft.check import check_draft

    d = tmp_path / "no_head"
    shutil.copytree(llama_draft, d)
    edit_tensors(d, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(E.DraftLoadError) as ei:
        load_draft(ext, d, target_dir, LLAMA)
    assert ei.value.codes == [E.MISSING_WEIGHT] and "lm_head.weight" in str(ei.value)
    assert check_draft(d).codes == [E.MISSING_WEIGHT]


def test_llama_draft_sharing_the_targets_lm_head_loads(ext, llama_draft, target_dir, tmp_path):
    """draft_vocab_size null (same vocab, no d2t): SGLang's __init__ rewrites it to vocab_size and takes the
    target's lm_head -- the loader must follow that rule, not demand a lm_head."""
    from malformed_drafts import edit_config, edit_tensors

    d = tmp_path / "shared_head"
    shutil.copytree(llama_draft, d)

    def drop(t):
        for k in ("lm_head.weight", "d2t", "t2d"):
            t.pop(k, None)

    edit_tensors(d, drop)
    edit_config(d, lambda c: c.__setitem__("draft_vocab_size", None))
    model = load_draft(ext, d, target_dir, LLAMA)
    assert model.load_lm_head_from_target is True
    assert json.loads((d / "config.json").read_text())["draft_vocab_size"] is None


def test_release_without_mla_class_refuses_clearly(ext, good):
    from sglang_eagle3_ext.draft.check import check_draft
    from sglang_eagle3_ext.patching import selected

    rep = check_draft(good, sglang_version="0.5.10")
    assert rep.codes == [E.DRAFT_CLASS] and "0.5.14" in rep.errors[0].message
    names = {s.name for s in selected(["draft"])}
    assert ("draft.mla_strict_load" in names) == ext.caps.HAS_MLA_DRAFT
