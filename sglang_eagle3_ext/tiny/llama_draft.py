"""Tiny EAGLE-3 drafts made with the speculators library itself (tests, GPU smoke runs, benchmarks).

Requires `speculators` (the package's `test` extra). Weights are random but finite, d2t/t2d are a
consistent hot-token mapping; the result is exactly what `save_pretrained` of a trained
speculators Eagle3 draft looks like.
"""
from __future__ import annotations

from pathlib import Path

from ..draft import errors as E


def make_speculators_draft(out, *, hidden: int = 64, vocab: int = 128, draft_vocab: int = 64,
                           aux_ids=(1, 2, 3), n_layers: int = 1, heads: int = 4, kv_heads: int = 2,
                           intermediate: int | None = None, target_hidden: int | None = None, seed: int = 0,
                           max_position_embeddings: int = 8192, dtype=None, **config_overrides) -> Path:
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    torch.manual_seed(seed)
    tl = LlamaConfig(hidden_size=hidden, intermediate_size=intermediate or 2 * hidden, num_hidden_layers=n_layers,
                     num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                     head_dim=hidden // heads, max_position_embeddings=max_position_embeddings)
    sc = SpeculatorsConfig(algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
                           default_proposal_method="greedy",
                           verifier=VerifierConfig(name_or_path=None, architectures=["DeepseekV3ForCausalLM"]))
    cfg = Eagle3SpeculatorConfig(transformer_layer_config=tl, draft_vocab_size=draft_vocab,
                                 target_hidden_size=target_hidden, eagle_aux_hidden_state_layer_ids=list(aux_ids),
                                 speculators_config=sc, **config_overrides)
    model = Eagle3DraftModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # speculators leaves lm_head/embeddings NaN until verifier weights are loaded: make all finite
            p.copy_(torch.randn_like(p) * 0.02 if p.dim() > 1 else 1.0 + 0.01 * torch.randn_like(p))
        if model.d2t is not None:
            hot = torch.sort(torch.randperm(vocab)[:draft_vocab]).values
            model.d2t.copy_(hot - torch.arange(draft_vocab))
            model.t2d.zero_()
            model.t2d[hot] = True
    if dtype is not None:
        model = model.to(dtype)
    from ..files.outdir import writing

    with writing(out, tool="tiny speculators draft", flag="out", replace=True) as tmp:   # never over a user's dir
        model.save_pretrained(tmp)
    return Path(out)


def sglang_weights_iterator(draft_dir):
    """(name, tensor) pairs read by SGLang's own iterators, as its model loader does."""
    from sglang.srt.model_loader import weight_utils as wu

    d = Path(draft_dir)
    st = sorted(str(p) for p in d.glob("*.safetensors"))
    if st:
        return wu.safetensors_weights_iterator(st)
    return wu.pt_weights_iterator(sorted(str(p) for p in d.glob("*.bin")))


# --- malformed variants of a good converted draft: name -> (expected code, builder) ------------------

def _edit_tensors(d: Path, fn):
    from safetensors.torch import load_file, save_file

    f = d / "model.safetensors"
    t = load_file(str(f))
    fn(t)
    save_file(t, str(f), metadata={"format": "pt"})


def _edit_config(d: Path, fn):
    import json

    p = d / "config.json"
    c = json.loads(p.read_text())
    fn(c)
    p.write_text(json.dumps(c, indent=2))


def _v_missing_fc(d):
    _edit_tensors(d, lambda t: t.pop("fc.weight"))


def _v_fc_unfused(d):
    def f(t):
        t["fc.weight"] = t["fc.weight"][:, : t["fc.weight"].shape[0]].clone()
    _edit_tensors(d, f)


def _v_unknown_key(d):
    import torch
    _edit_tensors(d, lambda t: t.__setitem__("layers.0.self_attn.q_norm.weight", torch.ones(16)))


def _v_d2t_length(d):
    def f(t):
        t["d2t"] = t["d2t"][:-4].clone()
    _edit_tensors(d, f)


def _v_d2t_range(d):
    def f(t):
        t["d2t"] = t["d2t"].clone()
        t["d2t"][-1] += 10_000
    _edit_tensors(d, f)


def nan_at(key: str):
    """A tensor edit: one NaN in tensor `key` (the value scan must name it)."""
    def f(t):
        w = t[key].clone()
        w[0, 0] = float("nan")
        t[key] = w
    return f


def _v_nan(d):
    _edit_tensors(d, nan_at("layers.0.mlp.down_proj.weight"))


def _v_truncated(d):
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-100])


def _v_missing_field(d):
    _edit_config(d, lambda c: c["eagle_config"].pop("eagle_aux_hidden_state_layer_ids"))


def _v_wrong_k(d):
    def f(c):
        ec = c["eagle_config"]
        ec["eagle_aux_hidden_state_layer_ids"] = ec["eagle_aux_hidden_state_layer_ids"] + [7]
        ec.pop("hf_hidden_state_indices", None)
        if "num_aux_hidden_states" in c:
            c["num_aux_hidden_states"] = len(ec["eagle_aux_hidden_state_layer_ids"])
    _edit_config(d, f)


def _v_norm_before_residual(d):
    _edit_config(d, lambda c: c.__setitem__("norm_before_residual", True))


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


def write_target_config(out, *, hidden: int = 64, vocab: int = 128, layers: int = 8, **overrides) -> Path:
    """A target-model config.json only (enough for the draft/target consistency rules)."""
    import json

    from ..files.outdir import writing

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": vocab, "max_position_embeddings": 8192, **overrides}
    with writing(out, tool="tiny target config", flag="out", replace=True) as tmp:   # never a real target's
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    return Path(out)
