"""The strict loader, fc width guard and capture-layer patch against the real SGLang classes on CPU."""

from __future__ import annotations

import logging
import types

import pytest
import torch
from helpers import LLAMA, build_draft, load_draft, serving, stub_deepseek_target

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft.keys import HF_INDICES_FIELD

pytestmark = pytest.mark.sglang
pytest.importorskip("speculators")
AUX = (2, 4, 6)  # HF hidden_states indices for the 8-layer stand-in target


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    return write_target_config(tmp_path_factory.mktemp("t") / "target")


@pytest.fixture(scope="module")
def spec_draft(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return make_speculators_draft(tmp_path_factory.mktemp("d") / "spec", aux_ids=AUX)


@pytest.fixture(scope="module")
def converted(spec_draft, ext, tmp_path_factory):
    from sglang_eagle3_ext.draft.convert import convert

    return convert(spec_draft, tmp_path_factory.mktemp("c") / "conv", log=lambda *_: None)  # installed release


def assert_values_equal(model, ckpt: dict[str, torch.Tensor]):
    """Every loaded parameter equals the checkpoint tensors it came from (q/k/v and gate/up stacked)."""
    params = dict(model.named_parameters())
    layer = "model.midlayer." if any(k.startswith("model.midlayer.") for k in params) else "model.layers.0."
    g = lambda k: ckpt[k].to(torch.float32)  # noqa: E731
    a = "layers.0.self_attn."
    m = "layers.0.mlp."
    expect = {
        "model.fc.weight": g("fc.weight"),
        "model.norm.weight": g("norm.weight"),
        "lm_head.weight": g("lm_head.weight"),
        layer + "self_attn.qkv_proj.weight": torch.cat(
            [g(a + "q_proj.weight"), g(a + "k_proj.weight"), g(a + "v_proj.weight")]
        ),
        layer + "self_attn.o_proj.weight": g(a + "o_proj.weight"),
        layer + "mlp.gate_up_proj.weight": torch.cat([g(m + "gate_proj.weight"), g(m + "up_proj.weight")]),
        layer + "mlp.down_proj.weight": g(m + "down_proj.weight"),
        **{
            layer + n: g("layers.0." + n)
            for n in ("input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
        },
    }
    for name, want in expect.items():
        torch.testing.assert_close(params[name].data.float(), want, rtol=0, atol=0, msg=name)
    hot = ckpt["d2t"] + torch.arange(ckpt["d2t"].shape[0])
    assert torch.equal(model.hot_token_id.cpu(), hot)


def _speculators_tensors(spec_draft):
    from safetensors.torch import load_file

    return load_file(str(spec_draft / "model.safetensors"))


def test_speculators_draft_loads_every_tensor_exactly(ext, spec_draft, converted, target_dir, caplog):
    with caplog.at_level(logging.INFO, logger="sglang_eagle3_ext"):
        model = load_draft(ext, converted, target_dir, LLAMA)
    assert_values_equal(model, _speculators_tensors(spec_draft))
    assert model.model.fc.in_features == 3 * 64


def test_specforge_midlayer_checkpoint_loads(ext, spec_draft, converted, target_dir, tmp_path):
    """SpecForge style: `midlayer.*`, `model.` prefixes; normalised for whatever the installed release holds."""
    import shutil

    from safetensors.torch import load_file, save_file

    d = tmp_path / "specforge"
    shutil.copytree(converted, d)
    t = load_file(str(d / "model.safetensors"))
    renamed = {
        ("model." if i % 2 else "") + k.replace("layers.0.", "midlayer."): v for i, (k, v) in enumerate(t.items())
    }
    save_file(renamed, str(d / "model.safetensors"))
    model = load_draft(ext, d, target_dir, LLAMA)
    assert_values_equal(model, _speculators_tensors(spec_draft))


def test_layer_keys_follow_the_release(ext, spec_draft, target_dir, tmp_path):
    """`layers.0.*` on a midlayer release / `midlayer.*` on a layers release: both load."""
    from sglang_eagle3_ext.draft.convert import convert

    other = "0.5.16" if ext.caps.HAS_MIDLAYER else "0.5.10"  # names of the *other* layout
    d = convert(spec_draft, tmp_path / "other", sglang_version=other, log=lambda *_: None)
    model = load_draft(ext, d, target_dir, LLAMA)
    assert_values_equal(model, _speculators_tensors(spec_draft))


@pytest.fixture(scope="module")
def variants(converted, tmp_path_factory):
    from malformed_drafts import MALFORMED, make_variant

    root = tmp_path_factory.mktemp("variants")
    return {n: make_variant(converted, n, root / n) for n in MALFORMED}


@pytest.mark.parametrize(
    "name",
    [
        "missing_fc",
        "fc_1xH",
        "unknown_key",
        "d2t_length",
        "d2t_out_of_range",
        "nan_weight",
        "truncated_file",
        "missing_config_field",
        "wrong_k",
        "target_hidden_mismatch",
        "norm_before_residual",
        "pickle_only_bin",
    ],
)
def test_malformed_variant_refused_by_loader_and_check(ext, variants, name, tmp_path):
    from malformed_drafts import TARGET_OVERRIDES

    from sglang_eagle3_ext.draft.check import check_draft
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    code, d = variants[name]
    target = write_target_config(tmp_path / "target", **TARGET_OVERRIDES.get(name, {}))
    with pytest.raises(E.DraftLoadError) as ei:
        load_draft(ext, d, target, LLAMA)
    assert code in ei.value.codes, str(ei.value)
    loader_msg = next(p.message for p in ei.value.problems if p.code == code)
    rep = check_draft(d, target=target, scan_values=True)  # installed release, same rules
    assert code in rep.codes, rep.render()
    check_msg = next(p.message for p in rep.errors if p.code == code)
    # same rule, same words (file paths may differ: the loader names the draft dir)
    assert loader_msg.split(": ", 1)[-1][:40] == check_msg.split(": ", 1)[-1][:40], (loader_msg, check_msg)


def test_distinct_codes():
    from malformed_drafts import MALFORMED

    assert len({c for c, _ in MALFORMED.values()}) == len(MALFORMED) == 12


def test_unpatched_release_drops_silently_patched_refuses(ext, converted, target_dir, tmp_path):
    """Without the patch an unknown key (and, on a midlayer release, `layers.0.*`) vanishes; with it: an error."""
    from malformed_drafts import make_variant

    import sglang_eagle3_ext
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    _, d = make_variant(converted, "unknown_key", tmp_path / "unknown")
    sglang_eagle3_ext.revert()
    try:
        model = build_draft(d, LLAMA)
        model.load_weights(sglang_weights_iterator(d))  # silently fine
        assert "q_norm" not in " ".join(n for n, _ in model.named_parameters())
        if ext.caps.HAS_MIDLAYER:  # 0.5.10: layers.0.* dropped, midlayer left at init values
            before = model.model.midlayer.mlp.down_proj.weight.clone()
            model.load_weights(sglang_weights_iterator(converted))
            assert torch.equal(before, model.model.midlayer.mlp.down_proj.weight)
    finally:
        sglang_eagle3_ext.apply(["draft"])
    with pytest.raises(E.DraftLoadError) as ei:
        load_draft(ext, d, target_dir, LLAMA)
    assert ei.value.codes == [E.UNEXPECTED_WEIGHT]
    assert "layers.0.self_attn.q_norm.weight" in str(ei.value)


def test_dropped_by_release_detected_by_accounting(ext, converted, target_dir, tmp_path):
    """A name the rules accept but the release's load_weights drops (a layer beyond the model) is reported."""
    from safetensors.torch import load_file

    model = build_draft(converted, LLAMA)
    extra = dict(load_file(str(converted / "model.safetensors")))
    extra["layers.3.mlp.down_proj.weight"] = extra["layers.0.mlp.down_proj.weight"]
    with serving(ext, target_dir, converted), pytest.raises(E.DraftLoadError) as ei:
        model.load_weights(iter(extra.items()))
    assert E.UNEXPECTED_WEIGHT in ei.value.codes and "layers.3" in str(ei.value)


# --- fc width guard -------------------------------------------------------------------------------


def _batch(mode, width, rows=4):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    hs = torch.empty(rows, width, device="meta")  # meta: any data access (a sync) would fail
    return types.SimpleNamespace(
        forward_mode=getattr(ForwardMode, mode), spec_info=types.SimpleNamespace(hidden_states=hs)
    )


@pytest.fixture(scope="module")
def draft_model(ext, converted, target_dir):
    return load_draft(ext, converted, target_dir, LLAMA)


def test_guard_refuses_unfused_target_states(draft_model):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    target_fed = [m for m in ("EXTEND", "DRAFT_EXTEND", "DRAFT_EXTEND_V2", "MIXED") if hasattr(ForwardMode, m)]
    assert "EXTEND" in target_fed and len(target_fed) >= 2
    for mode in target_fed:
        fb = _batch(mode, 64)
        with pytest.raises(E.DraftWidthError) as ei:  # through the patched real LlamaModel.forward
            draft_model.model.forward(torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long), fb)
        msg = str(ei.value)
        assert ei.value.codes == [E.FC_WIDTH] and "sends 64-wide" in msg and "192 = K(3) x target hidden(64)" in msg
        assert "not capturing aux hidden states" in msg and mode in msg
    with pytest.raises(E.DraftWidthError, match="captures 2 layers but the draft was trained on K=3"):
        draft_model.model.forward(None, None, _batch("EXTEND", 128))


def test_guard_passes_draft_decode_and_correct_width(draft_model):
    from sglang_eagle3_ext.in_server.draft.guard import check_width

    assert check_width(draft_model.model, _batch("DECODE", 64)) is None  # draft's own H-wide states
    assert check_width(draft_model.model, _batch("IDLE", 64, rows=0)) is None
    assert check_width(draft_model.model, _batch("EXTEND", 192)) is None  # fused K x H from the target


def test_startup_width_check_when_target_will_not_capture(ext, converted, target_dir, tmp_path, monkeypatch):
    import shutil

    from malformed_drafts import edit_config

    from sglang_eagle3_ext.in_server.draft.loader import DEFER_WIDTH_ENV

    d = tmp_path / "noaux"
    shutil.copytree(converted, d)
    edit_config(d, lambda c: c["eagle_config"].__setitem__("use_aux_hidden_state", False))
    with pytest.raises(E.DraftLoadError) as ei:
        load_draft(ext, d, target_dir, LLAMA)
    assert ei.value.codes == [E.FC_WIDTH] and "not capturing aux hidden states" in str(ei.value)
    monkeypatch.setenv(DEFER_WIDTH_ENV, "1")  # left to the forward guard
    load_draft(ext, d, target_dir, LLAMA)


# --- capture layers -------------------------------------------------------------------------------


def test_explicit_capture_layers_uses_recorded_hf_indices(ext, spec_draft, target_dir, tmp_path):
    """HF indices [1,4,6]: 0.5.14+ would add 1 (ids[0]==1), 0.5.10 always adds 1; we capture exactly [1,4,6]."""
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    d = convert(make_speculators_draft(tmp_path / "s", aux_ids=(1, 4, 6)), tmp_path / "c", log=lambda *_: None)
    import json

    ids = json.loads((d / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    t = stub_deepseek_target()
    with serving(ext, target_dir, d):
        t.set_eagle3_layers_to_capture(ids)
    assert t.model.layers_to_capture == [1, 4, 6] and t.capture_aux_hidden_states is True
    import sglang_eagle3_ext

    sglang_eagle3_ext.revert()
    try:
        u = stub_deepseek_target()
        u.set_eagle3_layers_to_capture(ids)
        assert u.model.layers_to_capture == [2, 5, 7]  # the release's +1 rule: off by one
    finally:
        sglang_eagle3_ext.apply(["draft"])


def test_capture_layers_out_of_range_refused(ext, converted, target_dir):
    t = stub_deepseek_target(n_layers=4)  # HF indices (2,4,6) do not exist in a 4-layer target
    with serving(ext, target_dir, converted), pytest.raises(E.DraftLoadError) as ei:
        t.set_eagle3_layers_to_capture([2, 4, 6])
    assert ei.value.codes == [E.LAYER_INDEX] and HF_INDICES_FIELD in str(ei.value)
