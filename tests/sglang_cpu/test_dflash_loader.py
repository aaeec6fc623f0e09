"""DFlash drafts in SGLang's own `DFlashDraftModel` on CPU: strict loading (every parameter equal to the file), a
table of malformed drafts that SGLang alone loads silently or refuses in its own words and that the patched class
refuses in one line naming the tensor or field, the fc width guard at `project_target_hidden`, and the revert."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from helpers import build_draft, checkpoint_tensors, load_draft, release_with, serving, target_config
from malformed_drafts import edit_config, edit_tensors

from sglang_eagle3_ext.draft import errors as E

pytestmark = pytest.mark.sglang
ARCH = "DFlashDraftModel"
H, VOCAB, N_LAYERS, TARGET_LAYERS, IDS = 64, 128, 2, 8, [1, 3, 5]  # the draft's fc takes K = 3 target layers


def make_dflash_draft(out, seed: int = 0):
    """A tiny DFlash draft in SGLang's layout (z-lab's): Qwen3 layers, fc over K target states, random weights."""
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    cfg = {
        "architectures": [ARCH],
        "model_type": "qwen3",
        "hidden_size": H,
        "intermediate_size": 2 * H,
        "num_hidden_layers": N_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": VOCAB,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "num_target_layers": TARGET_LAYERS,
        "dflash_config": {"block_size": 8, "target_layer_ids": IDS, "mask_token_id": VOCAB - 1},
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    t = {"fc.weight": r(H, len(IDS) * H), "hidden_norm.weight": r(H), "norm.weight": r(H)}
    for i in range(N_LAYERS):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        t.update({a + "q_proj.weight": r(64, H), a + "k_proj.weight": r(32, H), a + "v_proj.weight": r(32, H)})
        t.update({a + "o_proj.weight": r(H, 64), a + "q_norm.weight": r(16), a + "k_norm.weight": r(16)})
        t.update(
            {
                m + "gate_proj.weight": r(2 * H, H),
                m + "up_proj.weight": r(2 * H, H),
                m + "down_proj.weight": r(H, 2 * H),
            }
        )
        t.update({f"layers.{i}.input_layernorm.weight": r(H), f"layers.{i}.post_attention_layernorm.weight": r(H)})
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


has_dflash = release_with("HAS_DFLASH", ARCH)
target_dir = target_config(hidden=H, vocab=VOCAB, layers=TARGET_LAYERS)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_dflash_draft(tmp_path_factory.mktemp("dflash") / "good")


def assert_every_parameter_from_checkpoint(model, ckpt):
    """Each parameter equals the file's tensor(s): q/k/v and gate/up stacked by the release, the rest one to one."""
    used = set()
    for name, p in model.named_parameters():
        if ".qkv_proj." in name or ".gate_up_proj." in name:
            parts = ("q_proj", "k_proj", "v_proj") if ".qkv_proj." in name else ("gate_proj", "up_proj")
            fused = name.split(".")[-2]
            keys = [name.replace(fused, part) for part in parts]
            want = torch.cat([ckpt[k] for k in keys])
        else:
            keys, want = [name], ckpt[name]
        used |= set(keys)
        torch.testing.assert_close(p.data.float(), want.float(), rtol=0, atol=0, msg=name)
    assert used == set(ckpt)  # every tensor of the file reached a parameter


def _summary(caplog) -> str:
    """The strict loader's one summary line of a load (said once per draft folder)."""
    said = [r.getMessage() for r in caplog.records if "tensors loaded" in r.getMessage()]
    assert len(said) == 1, said
    return said[0]


def test_dflash_draft_loads_every_parameter_equal_to_the_file(has_dflash, good, target_dir, tmp_path, caplog):
    d = shutil.copytree(good, tmp_path / "good")  # a folder of its own: its summary is said here
    with caplog.at_level(logging.INFO, logger="sglang_eagle3_ext"):
        model = load_draft(has_dflash, d, target_dir, ARCH)
    assert type(model).__name__ == ARCH and model.fc.weight.shape == (H, len(IDS) * H)
    ckpt = checkpoint_tensors(good)
    assert_every_parameter_from_checkpoint(model, ckpt)
    line = _summary(caplog)
    assert line.startswith(f"DFlash draft {d} ({ARCH}): {len(ckpt)} tensors loaded, 0 ignored"), line
    assert f"fc {H}x{len(IDS) * H} (K={len(IDS)})" in line, line


def test_a_model_prefixed_checkpoint_loads_the_same(has_dflash, good, target_dir, tmp_path, caplog):
    """Names under `model.` (as some exports save them) are SGLang's too: same parameters, nothing refused."""
    d = shutil.copytree(good, tmp_path / "prefixed")
    edit_tensors(d, lambda t: t.update({f"model.{k}": t.pop(k) for k in list(t)}))
    with caplog.at_level(logging.INFO, logger="sglang_eagle3_ext"):
        model = load_draft(has_dflash, d, target_dir, ARCH)
    assert_every_parameter_from_checkpoint(model, checkpoint_tensors(good))
    assert f"strip 'model.' ({len(checkpoint_tensors(good))}x)" in _summary(caplog)


# --- malformed drafts: what SGLang alone does, what the patched class says ---------------------------------

SILENT, RAISES = "loads silently", "raises"


def _rename(old, new):
    return lambda t: t.__setitem__(new, t.pop(old))


def _nan(key):
    def f(t):
        w = t[key].clone()
        w[0, 0] = float("nan")
        t[key] = w

    return f


def _set(key, make):
    return lambda t: t.__setitem__(key, make(t))


def _dflash(**kv):
    return lambda c: c["dflash_config"].update(kv)


# name -> (tensor edit, config edit, what SGLang's own load_weights does, the tensor or field named, problem code)
MALFORMED = {
    "layer_tensor_renamed": (
        _rename("layers.0.self_attn.q_proj.weight", "layers.0.attn.q_proj.weight"),
        None,
        SILENT,
        "layers.0.attn.q_proj.weight",
        E.UNEXPECTED_WEIGHT,
    ),
    "missing_norm": (lambda t: t.pop("norm.weight"), None, SILENT, "norm.weight", E.MISSING_WEIGHT),
    "fc_of_another_k": (
        _set("fc.weight", lambda t: t["fc.weight"][:, : 2 * H].clone()),
        None,
        RAISES,
        "fc.weight",
        E.AUX_COUNT,
    ),
    "block_size_disagrees": (None, lambda c: c.__setitem__("block_size", 16), SILENT, "block_size", E.BLOCK_SIZE),
    "mask_token_outside_target_vocab": (None, _dflash(mask_token_id=VOCAB), SILENT, "mask_token_id", E.MASK_TOKEN),
    "layer_ids_past_the_target": (
        None,
        lambda c: (c.__setitem__("num_target_layers", 64), _dflash(target_layer_ids=[1, 30, 60])(c)),
        SILENT,
        "target_layer_ids",
        E.LAYER_INDEX,
    ),
    "nan_weight": (_nan("layers.1.mlp.down_proj.weight"), None, SILENT, "layers.1.mlp.down_proj.weight", E.NON_FINITE),
    "unknown_tensor": (
        _set("layers.0.self_attn.g_proj.weight", lambda t: torch.ones(4, H)),
        None,
        SILENT,
        "layers.0.self_attn.g_proj.weight",
        E.UNEXPECTED_WEIGHT,
    ),
    "layer_past_the_config": (
        _set("layers.2.mlp.down_proj.weight", lambda t: torch.ones(H, 2 * H)),
        None,
        SILENT,
        "layers.2.mlp.down_proj.weight",
        E.UNEXPECTED_WEIGHT,
    ),
    "missing_k_proj": (
        lambda t: t.pop("layers.1.self_attn.k_proj.weight"),
        None,
        SILENT,
        "layers.1.self_attn.k_proj.weight",
        E.MISSING_WEIGHT,
    ),
    "q_norm_of_another_head_dim": (
        _set("layers.0.self_attn.q_norm.weight", lambda t: torch.ones(8)),
        None,
        RAISES,
        "layers.0.self_attn.q_norm.weight",
        E.SHAPE,
    ),
    "reduced_vocab_head": (
        _set("lm_head.weight", lambda t: torch.ones(VOCAB // 2, H)),
        None,
        SILENT,
        "lm_head.weight",
        E.UNSUPPORTED_OPTION,
    ),
}


@pytest.fixture(scope="module")
def variants(good, tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash_variants")
    out = {}
    for name, (tensors, config, *_) in MALFORMED.items():
        d = root / name
        shutil.copytree(good, d)
        if tensors:
            edit_tensors(d, tensors)
        if config:
            edit_config(d, config)
        out[name] = d
    return out


def _plain_outcome(d) -> tuple[str, str]:
    """(SILENT or RAISES, SGLang's words) for SGLang's own DFlashDraftModel built and loaded from `d`."""
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    model = build_draft(d, ARCH)
    try:
        model.load_weights(sglang_weights_iterator(d))
    except (ValueError, AssertionError) as e:
        return RAISES, str(e)
    return SILENT, ""


@pytest.fixture
def unpatched(has_dflash):
    import sglang_eagle3_ext

    sglang_eagle3_ext.revert()
    yield has_dflash
    sglang_eagle3_ext.apply(["draft"])


@pytest.mark.parametrize("name", list(MALFORMED))
def test_sglang_alone_loads_or_raises_as_recorded(unpatched, variants, name):
    """Why the patch exists: all but two of these load without a word in SGLang's own class."""
    outcome, said = _plain_outcome(variants[name])
    assert outcome == MALFORMED[name][2], said


@pytest.mark.parametrize("name", list(MALFORMED))
def test_patched_class_refuses_in_one_line_naming_it(has_dflash, variants, name, target_dir):
    *_, named, code = MALFORMED[name]
    with pytest.raises(E.DraftLoadError) as ei:
        load_draft(has_dflash, variants[name], target_dir, ARCH)
    hits = [p.message for p in ei.value.problems if p.code == code]
    assert hits, str(ei.value)
    assert any(named in m for m in hits) and all("\n" not in m for m in hits), hits
    assert str(ei.value).startswith("DFlash draft "), str(ei.value)


def test_most_malformed_drafts_load_silently_in_sglang_alone(has_dflash):
    silent = [n for n, row in MALFORMED.items() if row[2] == SILENT]
    assert len(MALFORMED) >= 8 and len(silent) == len(MALFORMED) - 2


def test_a_shard_never_loaded_is_named_missing_not_nan(has_dflash, variants, target_dir):
    """q/k/v share one parameter: the shard no tensor reached keeps whatever memory it had (NaN here), which is
    the missing key's doing, not a NaN in the file."""
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    d = variants["missing_k_proj"]
    model = build_draft(d, ARCH)
    torch.nn.init.constant_(model.layers[1].self_attn.qkv_proj.weight, float("nan"))
    with serving(has_dflash, target_dir, d), pytest.raises(E.DraftLoadError) as ei:
        model.load_weights(sglang_weights_iterator(d))
    assert ei.value.codes == [E.MISSING_WEIGHT] and "layers.1.self_attn.k_proj.weight" in str(ei.value)


# --- target_layer_ids at start-up: refused by the class itself, before any weight ---------------------------


@pytest.mark.parametrize("recorded,ids", [(None, [0]), (None, [0, 1, 2]), (8, [0, 1, 2]), (2, [0, 1, 2])])
def test_the_start_up_bound_of_target_layer_ids_is_the_rules(has_dflash, good, tmp_path, recorded, ids):
    """A one-layer draft: the release's own DFlashDraftModel refuses target_layer_ids past its bound (a recorded
    num_target_layers, else what the release falls back on) as it is built; the rules of this release refuse
    exactly those, quoting its words."""
    from sglang_eagle3_ext.draft import keys, rules

    d = shutil.copytree(good, tmp_path / "d")

    def one_layer(c):
        c.pop("num_target_layers", None)
        c.update(num_hidden_layers=1)
        c["dflash_config"].update(target_layer_ids=ids, **({"num_target_layers": recorded} if recorded else {}))

    edit_config(d, one_layer)
    try:
        build_draft(d, ARCH)
        said = None
    except ValueError as e:
        said = str(e)
    cfg = json.loads((d / "config.json").read_text())
    _, problems = rules.spec_from_config(cfg, keys.Layout.from_caps(has_dflash.caps))
    ours = [p.message for p in problems if p.code == E.LAYER_INDEX and not p.warning]
    assert len(ours) == (said is not None), (said, ours)
    assert said is None or said in ours[0], (said, ours)


# --- fc width at project_target_hidden --------------------------------------------------------------------


@pytest.fixture(scope="module")
def draft_model(has_dflash, good, target_dir):
    return load_draft(has_dflash, good, target_dir, ARCH)


def test_width_guard_names_k_and_the_target_layers(draft_model):
    for width, cause in (
        (H, "captures no layers"),
        (2 * H, "captures 2 layers, not the draft's 3"),
        (100, "100 is not"),
    ):
        with pytest.raises(E.DraftWidthError) as ei:  # through the patched real project_target_hidden
            draft_model.project_target_hidden(torch.zeros(4, width))
        (problem,) = ei.value.problems
        assert problem.code == E.FC_WIDTH and "\n" not in problem.message, problem.message
        assert f"sends {width}-wide" in problem.message and "192 = K(3) x hidden(64)" in problem.message
        assert f"target layers {IDS}" in problem.message and cause in problem.message


def test_width_guard_passes_the_trained_width_unchanged(draft_model):
    x = torch.randn(5, len(IDS) * H)
    want = draft_model.hidden_norm(torch.nn.functional.linear(x, draft_model.fc.weight))
    torch.testing.assert_close(draft_model.project_target_hidden(x), want, rtol=0, atol=0)


# --- the revert, subclasses, releases without DFlash ------------------------------------------------------


def test_revert_restores_sglangs_own_methods_and_behaviour(has_dflash, variants, draft_model):
    import wrapt
    from sglang.srt.models.dflash import DFlashDraftModel

    import sglang_eagle3_ext

    patched = {m: DFlashDraftModel.__dict__[m] for m in ("load_weights", "project_target_hidden")}
    assert all(isinstance(f, wrapt.FunctionWrapper) for f in patched.values())
    sglang_eagle3_ext.revert()
    try:
        for m, f in patched.items():
            assert DFlashDraftModel.__dict__[m] is f.__wrapped__  # SGLang's own function, the very object
        assert _plain_outcome(variants["unknown_tensor"])[0] == SILENT
        outcome, said = _plain_outcome(variants["fc_of_another_k"])
        assert outcome == RAISES and said.startswith("DFLASH fc.weight shape mismatch")
        with pytest.raises(ValueError, match="DFLASH target_hidden feature dim mismatch"):
            draft_model.project_target_hidden(torch.zeros(4, H))
    finally:
        sglang_eagle3_ext.apply(["draft"])
    with pytest.raises(E.DraftWidthError):
        draft_model.project_target_hidden(torch.zeros(4, H))


def test_a_subclass_no_layout_describes_loads_as_sglang_loads_it(has_dflash, good, target_dir, tmp_path, caplog):
    """Laguna's DFlash class inherits load_weights and adds parameters (aux_hidden_norms, g_proj) the DFlash rules
    do not know: it is loaded by SGLang's code alone, said once, never refused for them."""
    from sglang.srt.models import dflash

    laguna = getattr(dflash, "DFlashLagunaForCausalLM", None)
    if laguna is None:
        pytest.skip(f"SGLang {has_dflash.version} has no DFlashLagunaForCausalLM")
    d = tmp_path / "laguna"
    shutil.copytree(good, d)
    edit_config(d, lambda c: c.update(architectures=[laguna.__name__], gating=False))
    norms = {f"aux_hidden_norms.{i}.weight": torch.full((H,), float(i + 2)) for i in range(len(IDS))}
    edit_tensors(d, lambda t: t.update(norms))
    with caplog.at_level(logging.INFO, logger="sglang_eagle3_ext"):
        model = load_draft(has_dflash, d, target_dir, laguna.__name__)
    for k, v in norms.items():
        assert torch.equal(dict(model.named_parameters())[k].data, v)
    assert any("DFlashLagunaForCausalLM" in r.getMessage() and "no strict" in r.getMessage() for r in caplog.records)
