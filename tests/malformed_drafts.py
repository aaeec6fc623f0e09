"""Malformed EAGLE-3 drafts for the tests: a good tiny draft (sglang_eagle3_ext.tiny) copied and broken one way
each, with the problem code `check` and the strict loader must name (imported as a plain module: tests/ is on
sys.path)."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft.arch import mla

# --- Llama layout (speculators' Eagle3 drafts) ---------------------------------------------------------------


def edit_tensors(d: Path, fn):
    from safetensors.torch import load_file, save_file

    f = d / "model.safetensors"
    t = load_file(str(f))
    fn(t)
    save_file(t, str(f), metadata={"format": "pt"})


def edit_config(d: Path, fn):
    import json

    p = d / "config.json"
    c = json.loads(p.read_text())
    fn(c)
    p.write_text(json.dumps(c, indent=2))


def _v_missing_fc(d):
    edit_tensors(d, lambda t: t.pop("fc.weight"))


def _v_fc_unfused(d):
    def f(t):
        t["fc.weight"] = t["fc.weight"][:, : t["fc.weight"].shape[0]].clone()

    edit_tensors(d, f)


def _v_unknown_key(d):
    import torch

    edit_tensors(d, lambda t: t.__setitem__("layers.0.self_attn.q_norm.weight", torch.ones(16)))


def _v_d2t_length(d):
    def f(t):
        t["d2t"] = t["d2t"][:-4].clone()

    edit_tensors(d, f)


def _v_d2t_range(d):
    def f(t):
        t["d2t"] = t["d2t"].clone()
        t["d2t"][-1] += 10_000

    edit_tensors(d, f)


def nan_at(key: str):
    """A tensor edit: one NaN in tensor `key` (the value scan must name it)."""

    def f(t):
        w = t[key].clone()
        w[0, 0] = float("nan")
        t[key] = w

    return f


def _v_nan(d):
    edit_tensors(d, nan_at("layers.0.mlp.down_proj.weight"))


def _v_truncated(d):
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-100])


def _v_missing_field(d):
    edit_config(d, lambda c: c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids"))


def _v_wrong_k(d):
    def f(c):
        ec = c["eagle_config"]
        ec["eagle_aux_hidden_state_layer_ids"] = ec["eagle_aux_hidden_state_layer_ids"] + [7]
        ec.pop("hf_hidden_state_indices", None)
        if "num_aux_hidden_states" in c:
            c["num_aux_hidden_states"] = len(ec["eagle_aux_hidden_state_layer_ids"])

    edit_config(d, f)


def _v_norm_before_residual(d):
    edit_config(d, lambda c: c.__setitem__("norm_before_residual", True))


def _v_pickle_only(d):
    import torch
    from safetensors.torch import load_file

    f = d / "model.safetensors"
    torch.save(load_file(str(f)), d / "pytorch_model.bin")
    f.unlink()


def _v_target_hidden(d):
    pass  # the draft is fine; the target it is served with has another hidden size (see TARGET_OVERRIDES)


MALFORMED = {
    "missing_fc": (E.MISSING_WEIGHT, _v_missing_fc),
    "fc_1xH": (E.FC_UNFUSED, _v_fc_unfused),
    "unknown_key": (E.UNEXPECTED_WEIGHT, _v_unknown_key),
    "d2t_length": (E.D2T_LENGTH, _v_d2t_length),
    "d2t_out_of_range": (E.D2T_RANGE, _v_d2t_range),
    "nan_weight": (E.NON_FINITE, _v_nan),
    "truncated_file": (E.BAD_FILE, _v_truncated),
    "missing_config_field": (E.CONFIG_MISSING, _v_missing_field),
    "wrong_k": (E.AUX_COUNT, _v_wrong_k),
    "target_hidden_mismatch": (E.TARGET_MISMATCH, _v_target_hidden),
    "norm_before_residual": (E.UNSUPPORTED_OPTION, _v_norm_before_residual),
    "pickle_only_bin": (E.PICKLE_ONLY, _v_pickle_only),
}
TARGET_OVERRIDES = {"target_hidden_mismatch": {"hidden_size": 32}}


def make_variant(good: Path, name: str, out: Path) -> tuple[str, Path]:
    """Copy `good` to `out` and break it the way `name` says; returns (expected code, out)."""
    import shutil

    shutil.copytree(good, out)
    code, build = MALFORMED[name]
    build(Path(out))
    return code, Path(out)


# --- MLA layout (Kimi-K2.5's drafts): name -> (expected code, what to break) --------------------------------------------


def edit_mla(d: Path, tensors_fn=None, config_fn=None):
    from safetensors.torch import load_file

    t = load_file(str(d / "model.safetensors"))
    c = json.loads((d / "config.json").read_text())
    if tensors_fn:
        tensors_fn(t)
    if config_fn:
        config_fn(c)
    from safetensors.torch import save_file

    # in place: `d` is the copy make_mla_variant has just made
    save_file({k: v.contiguous() for k, v in t.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(c, indent=2))


def _v_missing_lm_head(d):
    edit_mla(d, lambda t: t.pop("lm_head.weight"))


def _v_missing_kv_half(d):
    edit_mla(d, lambda t: t.pop(mla.KV_HALF))


def _v_q_a_1xH(d):
    def f(t):
        w = t[mla.Q_HALF]
        t[mla.Q_HALF] = w[:, : w.shape[1] // 2].clone()

    edit_mla(d, f)


def _v_fc_1xH(d):
    def f(t):
        w = t["fc.weight"]
        t["fc.weight"] = w[:, : w.shape[1] // 3].clone()

    edit_mla(d, f)


def _v_mla_unknown_key(d):
    def f(t):
        t["layers.0.mlp.shared_experts.gate_proj.weight"] = t["layers.0.mlp.gate_proj.weight"].clone()

    edit_mla(d, f)


def _v_mla_nan(d):
    edit_mla(d, nan_at("layers.0.self_attn.kv_b_proj.weight"))


def _v_mla_wrong_k(d):
    def f(c):
        ec = c["eagle_config"]
        ec["eagle_aux_hidden_state_layer_ids"] = ec["eagle_aux_hidden_state_layer_ids"] + [5]
        ec.pop("hf_hidden_state_indices", None)

    edit_mla(d, config_fn=f)


def _v_rope_dims(d):
    edit_mla(d, config_fn=lambda c: c.__setitem__("qk_rope_head_dim", 2 * c["qk_rope_head_dim"]))


def _v_lora_dims(d):
    edit_mla(d, config_fn=lambda c: c.__setitem__("kv_lora_rank", 2 * c["kv_lora_rank"]))


def _v_prefused(d):
    import torch

    def f(t):
        t[mla.FUSED_KEY] = torch.cat([t.pop(mla.Q_HALF), t.pop(mla.KV_HALF)])

    edit_mla(d, f)


MLA_MALFORMED = {
    "missing_lm_head": (E.MISSING_WEIGHT, _v_missing_lm_head),
    "missing_kv_a_half": (E.FUSED_HALF, _v_missing_kv_half),
    "q_a_proj_1xH": (E.MLA_INPUT, _v_q_a_1xH),
    "fc_1xH": (E.FC_UNFUSED, _v_fc_1xH),
    "unknown_key": (E.UNEXPECTED_WEIGHT, _v_mla_unknown_key),
    "nan_weight": (E.NON_FINITE, _v_mla_nan),
    "wrong_k": (E.AUX_COUNT, _v_mla_wrong_k),
    "wrong_rope_dim": (E.MLA_DIMS, _v_rope_dims),
    "wrong_lora_dim": (E.MLA_DIMS, _v_lora_dims),
    "prefused_qkv_a": (E.UNEXPECTED_WEIGHT, _v_prefused),
}


def make_mla_variant(good: Path, name: str, out: Path) -> tuple[str, Path]:
    import shutil

    shutil.copytree(good, out)
    code, build = MLA_MALFORMED[name]
    build(Path(out))
    return code, Path(out)


# --- DFlash layout (SGLang's DFlashDraftModel): name -> (expected code, what to break) ----------------------------
# The good draft: `convert` of a speculators DFlash draft (tiny/dflash_draft.py), ids [0, 1, 2], HF [1, 2, 3].


def _dflash_dc(fn):
    def f(c):
        fn(c["dflash_config"])

    return f


def _v_dflash_renamed(d):
    q = "layers.0.self_attn.q_proj.weight"
    edit_tensors(d, lambda t: t.update({"layers.0.attn.q_proj.weight": t.pop(q)}))


def _v_dflash_fc_other_k(d):
    edit_config(d, _dflash_dc(lambda dc: dc.update(target_layer_ids=[0, 1], hf_hidden_state_indices=[1, 2])))


def _v_dflash_reduced_head(d):
    """What a speculators draft trained over half the vocabulary holds (its lm_head), in SGLang's layout."""
    import torch

    rows = json.loads((d / "config.json").read_text())["vocab_size"] // 2
    edit_tensors(d, lambda t: t.update({"lm_head.weight": torch.randn(rows, t["norm.weight"].shape[0])}))


def _v_dflash_nan(d):
    edit_tensors(d, nan_at("layers.0.mlp.down_proj.weight"))


DFLASH_MALFORMED = {
    "layer_renamed": (E.UNEXPECTED_WEIGHT, _v_dflash_renamed),
    "missing_norm": (E.MISSING_WEIGHT, lambda d: edit_tensors(d, lambda t: t.pop("norm.weight"))),
    "fc_other_k": (E.AUX_COUNT, _v_dflash_fc_other_k),
    "block_size_disagrees": (E.BLOCK_SIZE, lambda d: edit_config(d, lambda c: c.update(block_size=4))),
    "block_size_1": (E.BLOCK_SIZE, lambda d: edit_config(d, _dflash_dc(lambda dc: dc.update(block_size=1)))),
    "mask_outside_vocab": (
        E.MASK_TOKEN,
        lambda d: edit_config(d, lambda c: c["dflash_config"].update(mask_token_id=c["vocab_size"])),
    ),
    "mask_missing": (E.MASK_TOKEN, lambda d: edit_config(d, _dflash_dc(lambda dc: dc.pop("mask_token_id")))),
    "nan_weight": (E.NON_FINITE, _v_dflash_nan),
    "reduced_vocab_head": (E.UNSUPPORTED_OPTION, _v_dflash_reduced_head),
    "ids_not_increasing": (
        E.LAYER_INDEX,
        lambda d: edit_config(d, _dflash_dc(lambda dc: dc.update(target_layer_ids=[0, 2, 1]))),
    ),
}


def make_dflash_variant(good: Path, name: str, out: Path) -> tuple[str, Path]:
    import shutil

    shutil.copytree(good, out)
    (Path(out) / ".sglang-eagle3-output.json").unlink(missing_ok=True)  # a copy edited by hand, not convert's
    code, build = DFLASH_MALFORMED[name]
    build(Path(out))
    return code, Path(out)
