"""Our trainable MLA draft (draft/arch/mla/net.py) against SGLang's own Eagle3DeepseekV2ForCausalLM on CPU:
the checkpoint we write goes through SGLang's load_weights -- wrapped by our strict loader (the `draft`
patches applied, as when serving) -- and both run the same tokens and target states (only SGLang's
attention kernel is replaced by an exact torch one, see mla_cpu.py)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from helpers import cosine
from mla_cpu import (
    MLA_AUX,
    MLA_TARGET,
    YARN,
    extend_batch,
    init_dp_attention,
    random_mla_draft,
    use_reference_attention,
    write_mla_target_config,
)

from sglang_eagle3_ext.training.mla.train import load_checkpoint

pytestmark = pytest.mark.sglang

# transformers 5 writes RoPE as rope_parameters (theta inside); older configs as rope_theta + rope_scaling
TARGET_V5 = {
    **{k: v for k, v in MLA_TARGET.items() if k not in ("rope_theta", "rope_scaling")},
    "rope_parameters": {**YARN, "rope_theta": 50000.0},
}


@pytest.fixture(scope="module", params=["rope_scaling", "rope_parameters"])
def draft_dir(tmp_path_factory, request):
    target = MLA_TARGET if request.param == "rope_scaling" else TARGET_V5
    return random_mla_draft(target, tmp_path_factory.mktemp("mla") / "draft")


@pytest.fixture(scope="module")
def ext(sglang_cpu, tmp_path_factory):
    """The draft patches on (strict MLA loader where the release has the class) and a target the draft fits."""
    import sglang_eagle3_ext

    sglang_eagle3_ext.apply(["draft"])
    sglang_cpu.target = write_mla_target_config(tmp_path_factory.mktemp("mla_target"))
    return sglang_cpu


@contextlib.contextmanager
def _served(h, path):
    """Server args as the draft's scheduler sees them (target + this draft), restored afterwards."""
    from sglang.srt.configs.model_config import ModelConfig

    sa = h.server_args(str(path))
    h.publish(sa)
    init_dp_attention(sa, ModelConfig.from_server_args(sa))
    h.publish(h.server_args(str(h.target), speculative_draft_model_path=str(path)))
    try:
        yield sa
    finally:
        h.publish(h.server_args(str(h.target)))


def _sglang_draft(h, path):
    from safetensors.torch import load_file
    from sglang.srt.models.registry import ModelRegistry
    from transformers import AutoConfig

    cls = ModelRegistry.resolve_model_cls(["Eagle3DeepseekV2ForCausalLM"])[0]
    with _served(h, path):
        m = cls(AutoConfig.from_pretrained(str(path))).float()
        with torch.no_grad():
            for p in m.parameters():
                p.fill_(float("nan"))  # anything load_weights leaves untouched poisons the output
        m.load_weights(iter(load_file(str(path / "model.safetensors")).items()))
    assert "strict" in type(m).load_weights.__qualname__.lower() or hasattr(type(m).load_weights, "__wrapped__")
    m.model.embed_tokens.weight.data = m.model.embed_tokens.weight.data.float()
    return m


@pytest.mark.parametrize("own_states", [False, True], ids=["target-fed", "draft-states"])
def test_same_logits_as_sglang(ext, draft_dir, own_states, monkeypatch):
    pytest.importorskip("sglang.srt.models.kimi_k25_eagle3")  # SGLang's MLA draft: 0.5.12+
    ours = load_checkpoint(draft_dir).float().eval()
    theirs = _sglang_draft(ext, draft_dir)
    assert type(theirs).__module__.endswith("kimi_k25_eagle3")
    torch.manual_seed(1)
    lens = [5, 9]
    T = sum(lens)
    ids = torch.randint(0, MLA_TARGET["vocab_size"], (T,))
    width = MLA_TARGET["hidden_size"] * (1 if own_states else len(MLA_AUX))
    hidden = torch.randn(T, width)
    backend = use_reference_attention(monkeypatch)
    fb, pos = extend_batch(ids, lens, hidden, backend)
    # the draft's own states come in draft-extend/decode batches, where our fc width guard lets them through;
    # in this EXTEND batch call SGLang's forward under the guard (wrapt keeps it as __wrapped__)
    model_fwd = type(theirs.model).forward
    model_fwd = getattr(model_fwd, "__wrapped__", model_fwd) if own_states else model_fwd
    with torch.no_grad():
        h_theirs, aux_theirs = model_fwd(theirs.model, ids, pos, fb)
        logits_theirs = h_theirs @ theirs.lm_head.weight.float().T
        logits_ours, state_ours = ours(ids, pos, hidden, lens)
        # the class's own forward (LogitsProcessor: last token of each sequence)
        last = None if own_states else theirs(ids, pos, fb).next_token_logits
    cos = cosine(logits_ours, logits_theirs)
    assert torch.isfinite(logits_theirs).all()
    print(f"MLA draft vs SGLang: min per-token logits cosine {cos.min():.6f} over {T} tokens")
    assert cos.min() >= 0.999, f"per-token logits cosine {cos.tolist()}"
    assert cosine(state_ours, aux_theirs[0]).min() >= 0.999  # the state the next draft step gets
    ends = torch.tensor(lens).cumsum(0) - 1
    if last is not None:
        assert cosine(logits_ours[ends], last).min() >= 0.999
    # the comparison can fail: a draft with a different weight does not match
    ours.layers[0].self_attn.kv_b_proj.weight.data.mul_(-1)
    with torch.no_grad():
        assert cosine(ours(ids, pos, hidden, lens)[0], logits_theirs).min() < 0.99


def test_first_unrolled_step_is_the_plain_forward(draft_dir):
    m = load_checkpoint(draft_dir).float().eval()
    T = 12
    ids = torch.randint(0, MLA_TARGET["vocab_size"], (T,))
    target = torch.randn(T, MLA_TARGET["hidden_size"] * len(MLA_AUX))
    with torch.no_grad():
        steps = m.forward_steps(ids, target, 3)
        plain, state = m(ids, torch.arange(T), target)
        assert torch.allclose(steps[0], plain, atol=1e-5)
        # step 1 at row p == a plain extend whose row p carries step 0's state of row p-1, seeing only
        # target-fed keys up to p-1 and itself: check the last row against that explicit construction
        p = T - 1
        sub_ids = torch.cat([ids[:p], ids[p : p + 1]])
        sub_hidden = torch.cat([m.project(target[:p]), state[p - 1 : p]])
        explicit, _ = m(sub_ids, torch.arange(p + 1), sub_hidden)
        assert torch.allclose(steps[1][p], explicit[p], atol=1e-4)
