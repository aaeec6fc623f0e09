"""`eval`'s DFlash round against SGLang's own DFlashDraftModel on CPU, loaded through the strict loader as a server
loads it and run as speculative/dflash_worker_v2 runs it: the context rows materialised per layer through the
class's kv_proj_only / apply_k_norm / apply_k_rope, then one forward of the block [x_a, mask ...] at positions
a..a+B-1 with the target's embeddings as input_embeds, its states through the target's lm_head, the argmax at
block positions 1..B-1. Only the attention kernel is replaced by an exact torch one that sees the layer's cached
context and the block's own keys, causal or not as the layer's attn_type says (SGLang's backends do the same)."""

from __future__ import annotations

import pytest
import torch
from helpers import load_draft
from mla_cpu import RefAttention

pytestmark = pytest.mark.sglang
ARCH = "DFlashDraftModel"
H, V, IDS, B = 64, 96, (0, 2, 4), 5


class BlockAttention(RefAttention):
    """Queries of one block over the layer's context (set per round) and the block's own keys."""

    context: dict = {}

    def forward(self, q, k, v, layer, fb, save_kv_cache=True, **kw):
        from sglang.srt.layers.radix_attention import AttentionType

        T, heads, d = q.shape[0], layer.tp_q_head_num, layer.head_dim
        ck, cv = self.context[layer.layer_id]
        keys = torch.cat([ck, k.reshape(T, -1, d)]).float()
        vals = torch.cat([cv, v.reshape(T, -1, d)]).float()
        rep = heads // keys.shape[1]
        s = torch.einsum("thd,shd->hts", q.reshape(T, heads, d).float(), keys.repeat_interleave(rep, 1))
        S = ck.shape[0]
        if layer.attn_type != AttentionType.ENCODER_ONLY:
            s[:, :, S:] = s[:, :, S:].masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        w = (s * layer.scaling).softmax(-1)
        return torch.einsum("hts,shd->thd", w, vals.repeat_interleave(rep, 1)).to(q.dtype).reshape(T, -1)


@pytest.fixture
def attention(monkeypatch):
    backend = BlockAttention()
    from sglang.srt.model_executor import forward_context

    monkeypatch.setattr(forward_context, "_current", forward_context.ForwardContext(attn_backend=backend))
    return backend


@pytest.fixture(scope="module")
def pair(ext, tmp_path_factory):
    """(eval's loaded draft, SGLang's class loaded from the same folder, the target's embeddings and head)."""
    from safetensors.torch import save_file

    from sglang_eagle3_ext.acceptance import drafts
    from sglang_eagle3_ext.tiny.dflash_draft import dflash_draft_config, dflash_tensors, write_draft
    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    if not ext.caps.HAS_DFLASH:
        pytest.skip(f"SGLang {ext.version} has no {ARCH}")
    root = tmp_path_factory.mktemp("dflash_equiv")
    target = write_target_config(root / "target", hidden=H, vocab=V, layers=6)
    g = torch.Generator().manual_seed(0)
    embed, head = 0.5 * torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
    save_file({"model.embed_tokens.weight": embed, "lm_head.weight": head}, str(target / "model.safetensors"))
    cfg = dflash_draft_config(
        hidden=H,
        vocab=V,
        n_layers=2,
        head_dim=16,
        target_layer_ids=IDS,
        block_size=B,
        dtype="float32",
        num_target_layers=6,
    )
    # norms away from 1, projections at a scale where attention is not flat
    tensors = {
        k: (1 + 0.2 * torch.randn(t.shape, generator=g)) if t.dim() == 1 else 0.3 * torch.randn(t.shape, generator=g)
        for k, t in dflash_tensors(cfg).items()
    }
    draft = write_draft(root / "draft", cfg, tensors)
    theirs = load_draft(ext, draft, target, ARCH).float().eval()
    ours = drafts.load(draft, target, "cpu", torch.float32)
    return ours, theirs, embed, head


def _block_batch(theirs, ids, a: int, attention):
    """(block, positions, ForwardBatch) of the verify forward at anchor a: [ids[a], mask ...] at a..a+B-1 over a
    context of a rows, as the DFLASH worker builds it."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    block = torch.full((B,), int(theirs.config.dflash_config["mask_token_id"]))
    block[0] = ids[a]
    positions = a + torch.arange(B)
    fb = ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=1,
        input_ids=block,
        req_pool_indices=torch.zeros(1, dtype=torch.long),
        seq_lens=torch.tensor([a]),
        out_cache_loc=torch.arange(B),
        seq_lens_sum=a,
        positions=positions,
        capture_hidden_mode=CaptureHiddenMode.NULL,
    )
    fb.attn_backend = attention
    return block, positions, fb


def _sglang_round(theirs, embed, head, ids, states, a: int, attention) -> list[int]:
    """One round at anchor a of one request, as the DFLASH worker runs SGLang's class."""
    fwd = type(theirs).project_target_hidden
    ctx = getattr(fwd, "__wrapped__", fwd)(theirs, states[:a])
    pos = torch.arange(a)
    attention.context = {}
    for layer in theirs.layers:
        attn = layer.self_attn
        k, v = attn.kv_proj_only(ctx)
        k = attn.apply_k_rope(pos, attn.apply_k_norm(k))
        attention.context[attn.attn.layer_id] = (k.view(a, -1, attn.head_dim), v.view(a, -1, attn.head_dim))
    block, positions, fb = _block_batch(theirs, ids, a, attention)
    with torch.no_grad():
        hidden = theirs.forward(block, positions, fb, input_embeds=embed[block]).hidden_states
    return (hidden[1:] @ head.T).argmax(-1).tolist()


def test_a_round_equals_sglangs_class_at_every_anchor(pair, attention):
    from sglang_eagle3_ext.acceptance import block
    from sglang_eagle3_ext.acceptance.simulate import pack

    ours, theirs, embed, head = pair
    torch.manual_seed(1)
    seqs = [torch.randint(0, V - 1, (n,)) for n in (9, 13)]
    states = [torch.randn(int(s.shape[0]), len(IDS) * H) for s in seqs]
    p = pack(list(zip(seqs, states)), "cpu", torch.float32)
    with torch.no_grad():
        got = block.block_tokens(ours.model, p, B - 1, ours.hot)
    start, rounds = 0, set()
    for ids, st in zip(seqs, states):
        for a in range(1, int(ids.shape[0])):
            want = _sglang_round(theirs, embed, head, ids, st, a, attention)
            assert got[start + a].tolist() == want, a
            rounds.add(tuple(want))
        start += int(ids.shape[0])
    assert len(rounds) > 8, rounds  # the draft is no constant: the comparison can fail


def test_the_states_equal_sglangs_class(pair, attention):
    """Beyond the argmax: the block's normed states at one anchor, every position."""
    ours, theirs, embed, head = pair
    torch.manual_seed(3)
    ids, st, a = torch.randint(0, V - 1, (12,)), torch.randn(12, len(IDS) * H), 8
    _sglang_round(theirs, embed, head, ids, st, a, attention)  # fills the context of the layers
    block, positions, fb = _block_batch(theirs, ids, a, attention)
    m = ours.model
    with torch.no_grad():
        want = theirs.forward(block, positions, fb, input_embeds=embed[block]).hidden_states
        kv = m.context(m.project(st[:a]), torch.arange(a))
        got = m.block_states(ids[a : a + 1], torch.tensor([a]), kv, torch.ones(1, a, dtype=torch.bool), B)[0]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
