"""`eval`'s draft forward against SGLang's own draft classes on CPU, both layouts (LlamaForCausalLMEagle3 and the
MLA Eagle3DeepseekV2ForCausalLM), loaded through the strict loader as a server loads them, the embeddings then
swapped for the target's as the EAGLE worker does. Only SGLang's attention kernel is replaced by an exact torch
one (mla_cpu.py; grouped-query heads repeated for the Llama draft).

1. The target-fed forward (a draft-extend): logits and the state handed on, per token.
2. A whole verify round at many anchors: eval's batched simulation proposes the same tokens as SGLang's class
   run step by step on what its KV cache holds at each step (the target-fed rows, then this round's own rows:
   its sampled tokens, its states), each step one causal extend.
"""

from __future__ import annotations

import types

import acceptance_world as W
import pytest
import torch
from helpers import LLAMA, cosine, load_draft
from mla_cpu import (
    MLA_AUX,
    MLA_TARGET,
    RefAttention,
    extend_batch,
    init_dp_attention,
    random_mla_draft,
    write_mla_target_config,
)

pytestmark = pytest.mark.sglang


class GroupedRefAttention(RefAttention):
    """RefAttention with each KV head repeated for its query heads (the Llama draft is GQA)."""

    def forward(self, q, k, v, layer, fb, save_kv_cache=True, **kw):
        T, H = q.shape[0], layer.tp_q_head_num
        kv = k.numel() // (T * layer.head_dim)
        k = k.reshape(T, kv, -1).repeat_interleave(H // kv, 1)
        v = v.reshape(T, kv, -1).repeat_interleave(H // kv, 1)
        return super().forward(q, k, v, layer, fb, save_kv_cache, **kw)


@pytest.fixture
def attention(monkeypatch):
    backend = GroupedRefAttention()
    from sglang.srt.model_executor import forward_context

    monkeypatch.setattr(forward_context, "_current", forward_context.ForwardContext(attn_backend=backend))
    return backend


def _llama(ext, root):
    target = W.write_target(root / "target")
    draft = W.write_draft(root / "draft", W.draft_config(layers=2), W.draft_tensors(copy=False, layers=2, scale=1.0))
    theirs = load_draft(ext, draft, target, LLAMA).float()
    return draft, target, theirs, W.K * W.H, W.V


def _mla(ext, root):
    from safetensors.torch import save_file

    if not ext.caps.HAS_MLA_DRAFT:
        pytest.skip(f"SGLang {ext.version} has no MLA EAGLE-3 draft class")
    target = write_mla_target_config(root / "mla_target")
    draft = random_mla_draft(MLA_TARGET, root / "mla_draft")
    save_file(
        {
            "model.embed_tokens.weight": torch.randn(320, 64),
            "lm_head.weight": torch.randn(320, 64),
            "model.norm.weight": torch.ones(64),
        },
        str(target / "model.safetensors"),
    )
    theirs = _sglang_mla(ext, draft, target)
    return draft, target, theirs, 64 * len(MLA_AUX), 320


def _sglang_mla(h, draft, target):
    from safetensors.torch import load_file
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models.registry import ModelRegistry
    from transformers import AutoConfig

    cls = ModelRegistry.resolve_model_cls(["Eagle3DeepseekV2ForCausalLM"])[0]
    sa = h.server_args(str(draft))
    h.publish(sa)
    init_dp_attention(sa, ModelConfig.from_server_args(sa))
    h.publish(h.server_args(str(target), speculative_draft_model_path=str(draft)))
    try:
        m = cls(AutoConfig.from_pretrained(str(draft))).float()
        m.load_weights(iter(load_file(str(draft / "model.safetensors")).items()))
    finally:
        h.publish(h.server_args(str(target)))
    return m


@pytest.fixture(scope="module", params=["llama", "mla"])
def pair(request, ext, tmp_path_factory):
    """(eval's loaded draft, SGLang's model with the worker's embedding swap, width of the aux states, vocab)."""
    from safetensors.torch import load_file

    from sglang_eagle3_ext.acceptance import drafts

    root = tmp_path_factory.mktemp(request.param)
    draft, target, theirs, width, vocab = (_llama if request.param == "llama" else _mla)(ext, root)
    embed = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"].float()
    theirs.model.embed_tokens.weight.data = embed.clone()  # the worker's set_embed (target_hidden == hidden)
    ours = drafts.load(draft, target, "cpu", torch.float32)
    return types.SimpleNamespace(name=request.param, ours=ours, theirs=theirs, width=width, vocab=vocab)


def _sglang_extend(pair, ids, hidden, backend):
    """SGLang's draft model on one sequence (an EXTEND batch from an empty cache): (logits, state) per token."""
    fb, pos = extend_batch(ids, [int(ids.shape[0])], hidden, backend)
    fwd = type(pair.theirs.model).forward
    fwd = getattr(fwd, "__wrapped__", fwd)  # past the fc width guard: rows may carry the draft's own states
    with torch.no_grad():
        h, aux = fwd(pair.theirs.model, ids, pos, fb)
    rows = pair.ours.model.lm_head.out_features  # SGLang pads its head; its logits processor cuts there
    return (h @ pair.theirs.lm_head.weight.float().T)[:, :rows], aux[0]


def _fc(pair, aux):
    out = pair.theirs.model.fc(aux)
    return out[0] if isinstance(out, tuple) else out


def test_target_fed_forward_equals_sglang(pair, attention):
    from sglang_eagle3_ext.acceptance.simulate import _forward, pack

    torch.manual_seed(1)
    T = 11
    ids = torch.randint(0, pair.vocab, (T,))
    aux = torch.randn(T, pair.width)
    want_logits, want_state = _sglang_extend(pair, ids, aux, attention)
    p = pack([(ids, aux)], "cpu", torch.float32)
    with torch.no_grad():
        logits, state = _forward(pair.ours.model, ids, pair.ours.model.project(aux), p.local, p, 0, [])
    print(
        f"{pair.name}: min per-token cosine logits {cosine(logits, want_logits).min():.6f}, "
        f"state {cosine(state, want_state).min():.6f}"
    )
    assert cosine(logits, want_logits).min() >= 0.999 and cosine(state, want_state).min() >= 0.999
    assert torch.equal(logits.argmax(-1), want_logits.argmax(-1))


def _sglang_round(pair, ids, aux, a: int, steps: int, backend) -> list[int]:
    """Draft tokens 1..steps at anchor a, SGLang's class run on its KV cache's contents at each step."""
    hot = pair.theirs.hot_token_id
    toks, hidden, out = list(ids[1 : a + 1].tolist()), [_fc(pair, aux[:a])], []
    for _ in range(steps):
        logits, state = _sglang_extend(pair, torch.tensor(toks), torch.cat(hidden), backend)
        j = int(logits[-1].argmax())
        out.append(int(hot[j]) if hot is not None else j)
        toks.append(out[-1])
        hidden.append(state[-1:])
    return out


def test_verify_round_equals_sglang_step_by_step(pair, attention):
    from sglang_eagle3_ext.acceptance.simulate import draft_tokens, pack

    torch.manual_seed(2)
    seqs = [torch.randint(0, pair.vocab, (n,)) for n in (9, 14)]
    auxs = [0.1 * torch.randn(int(s.shape[0]), pair.width) for s in seqs]  # small: attention has a say
    steps = 4
    p = pack(list(zip(seqs, auxs)), "cpu", torch.float32)
    with torch.no_grad():
        got = draft_tokens(pair.ours.model, p, steps, pair.ours.hot)
    start, rounds = 0, set()
    for ids, aux in zip(seqs, auxs):
        for a in range(1, int(ids.shape[0]) - steps + 2):  # every anchor whose round stays in the sequence
            want = _sglang_round(pair, ids, aux, a, steps, attention)
            c = start + a - 1
            assert [int(got[k, c + k]) for k in range(steps)] == want, (pair.name, a)
            rounds.add(tuple(want))
        start += int(ids.shape[0])
    assert len(rounds) > 4, rounds  # the draft is no constant: the comparison can fail
