"""eval's DFlash network (draft/arch/dflash/net.py) against a real peer: speculators' DFlashDraftModel on the same
weights, at the block positions SGLang drafts from (1..B-1).

speculators' training forward is SGLang's serving math for full-attention layers: the anchor's block is
[input_ids[a], mask x (B-1)] at positions a..a+B-1, it sees the base rows before a (hidden_norm(fc(states)),
through k_proj/k_norm/RoPE and v_proj, no input_layernorm) and its whole own block, and the targets of block
position k are the verifier's token a+k. Where the two differ, eval follows SGLang and refuses what it cannot
reproduce: sliding-window layers (speculators' window is counted from the anchor and sees its whole block;
SGLang runs them as causal windowed attention), a reduced draft vocabulary (SGLang drafts through the target's
lm_head), sample_from_anchor (SGLang always drafts from positions 1..B-1)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("speculators.models.dflash")

from sglang_eagle3_ext.boundary import BadInput  # noqa: E402
from sglang_eagle3_ext.draft.arch.dflash.net import DFlashDraft  # noqa: E402

H, V, K, MASK = 32, 64, 3, 63


def _cfg(layers: int, block: int, **over) -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        "hidden_size": H,
        "intermediate_size": 48,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": V,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "dflash_config": {"target_layer_ids": list(range(K)), "mask_token_id": MASK, "block_size": block},
        **over,
    }


def _peer(layers: int, block: int, seed: int):
    from speculators.models.dflash import DFlashSpeculatorConfig
    from speculators.models.dflash.core import DFlashDraftModel
    from transformers.models.qwen3 import Qwen3Config

    c = _cfg(layers, block)
    tl = Qwen3Config(
        **{k: c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")},
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=V,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
    )
    tl._attn_implementation = "eager"  # a dense mask on CPU (flex attention's block mask needs compiling)
    sc = DFlashSpeculatorConfig(
        transformer_layer_config=tl,
        draft_vocab_size=V,
        block_size=block,
        aux_hidden_state_layer_ids=[i + 1 for i in range(K)],
        mask_token_id=MASK,
    )
    peer = DFlashDraftModel(sc).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peer.named_parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g) + (1.0 if name.endswith("norm.weight") else 0.0))
    return peer, c


@pytest.mark.parametrize("layers,block,T", [(1, 4, 11), (2, 5, 14), (3, 8, 12)])
def test_the_network_equals_speculators_dflash_at_the_draft_positions(layers, block, T):
    peer, cfg = _peer(layers, block, seed=layers)
    net = DFlashDraft(cfg).eval()
    own = net.state_dict()
    net.load_state_dict({k: v for k, v in peer.state_dict().items() if k in own}, strict=True)
    g = torch.Generator().manual_seed(10 + layers)
    ids = torch.randint(0, MASK, (1, T), generator=g)
    states = torch.randn(1, T, K * H, generator=g)
    n = T - block  # speculators' anchors: every position but the last block's; all of them when max_anchors = n
    with torch.no_grad():
        _, logits, *_ = peer._backbone_forward(
            states,
            ids,
            torch.ones(1, T),
            torch.randn(1, T, H, generator=g),
            torch.zeros(1, T, dtype=torch.long),
            max_anchors=n,
        )
        want = logits[0].view(n, block, V)[:, 1:]
        pos = torch.arange(T)
        kv = net.context(net.project(states[0]), pos)
        anchors = torch.arange(n)
        got = net(ids[0, :n], anchors, kv, pos[None, :] < anchors[:, None])
    assert got.shape == want.shape == (n, block - 1, V)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_a_block_sees_only_the_context_before_its_anchor_and_all_of_its_own_block():
    """Non-causal inside the block: the proposal at position 1 changes with the mask token's embedding at the
    last position; the context rows at and after the anchor change nothing."""
    _, cfg = _peer(2, 4, seed=0)
    torch.manual_seed(0)
    net = DFlashDraft(cfg).eval()
    T, a = 10, 6
    states = torch.randn(T, K * H)
    pos = torch.arange(T)
    with torch.no_grad():
        kv = net.context(net.project(states), pos)
        base = net(torch.tensor([5]), torch.tensor([a]), kv, (pos < a)[None])
        later = states.clone()
        later[a:] = torch.randn(T - a, K * H)
        same = net(torch.tensor([5]), torch.tensor([a]), net.context(net.project(later), pos), (pos < a)[None])
        earlier = states.clone()
        earlier[a - 1] = torch.randn(K * H)
        moved = net(torch.tensor([5]), torch.tensor([a]), net.context(net.project(earlier), pos), (pos < a)[None])
        net.embed_tokens.weight[MASK] += 1.0
        remasked = net(torch.tensor([5]), torch.tensor([a]), kv, (pos < a)[None])
    assert torch.equal(base, same)
    assert not torch.allclose(base, moved)
    assert not torch.allclose(base[:, 0], remasked[:, 0])


@pytest.mark.parametrize(
    "over,names",
    [
        ({"layer_types": ["sliding_attention"], "sliding_window": 8}, "layer_types"),
        ({"dflash_config": {"block_size": 4}}, "mask_token_id"),
        ({"dflash_config": {"mask_token_id": V}}, "mask_token_id"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_what_eval_cannot_reproduce_is_refused_naming_it(over, names):
    with pytest.raises(BadInput, match=names):
        DFlashDraft(_cfg(1, 4, **over))
