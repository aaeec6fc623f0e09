"""eval's block verify (acceptance/block.py), the DFLASH worker's round: on drafts whose proposals are known by
construction (the target's continuation, always wrong, right for the first j positions), each round accepts what
the construction says, on SGLang's basis (accepted drafts + 1); and the batched simulation of real random DFlash
networks equals one plain forward per anchor over only the context a server holds then."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sglang_eagle3_ext.acceptance import block  # noqa: E402
from sglang_eagle3_ext.acceptance.simulate import pack, run_lengths  # noqa: E402
from sglang_eagle3_ext.acceptance.stats import Tally, Walk  # noqa: E402
from sglang_eagle3_ext.draft.arch.dflash.net import DFlashDraft  # noqa: E402

V, WRONG = 40, 39  # the sequences use ids 0..37; WRONG is never one of them
LOOK = 8  # the oracle's states hold this many tokens


def _cfg(layers: int = 1, **over) -> dict:
    return {
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 4,
        "vocab_size": V,
        "rms_norm_eps": 1e-6,
        "dflash_config": {"target_layer_ids": [0, 1], "mask_token_id": 38, "block_size": 4},
        **over,
    }


class Oracle(DFlashDraft):
    """A draft whose state of row r holds x_{r+1} .. x_{r+LOOK} (its "target states"). Its block at anchor a
    proposes x_{a+k} at position k <= right (read from the last context row it sees, a-1), WRONG after -- but only
    when it is handed the anchor it should be: bonus x_a, the block at position a, exactly the rows before a
    visible; else WRONG everywhere."""

    def __init__(self, right: int):
        super().__init__(_cfg())
        self.right = right

    def project(self, target_states):
        return target_states

    def context(self, ctx, positions):
        return [(ctx, positions)]

    def forward(self, bonus, start, kv, visible, size=None):
        rows, positions = kv[0]
        out = torch.full((bonus.shape[0], size - 1), WRONG)
        for n in range(bonus.shape[0]):
            seen = visible[n].nonzero().flatten()
            if not len(seen):
                continue
            last = rows[seen[-1]]
            contiguous = torch.equal(positions[seen], torch.arange(int(start[n]), device=positions.device))
            if contiguous and int(last[0]) == int(bonus[n]):
                k = min(self.right, size - 1, LOOK - 1)
                out[n, :k] = last[1 : k + 1].long()
        return torch.nn.functional.one_hot(out, V).float()


def _sequences(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randperm(38, generator=g)[:n] for n in lens]  # no token twice: a repeat is never a lucky hit


def _oracle_states(ids):
    L = ids.shape[0]
    pad = torch.cat([ids, torch.full((LOOK,), WRONG)]).float()
    return torch.stack([pad[r + 1 : r + 1 + LOOK] for r in range(L)])


def _rounds(model, seqs, steps, region=None):
    p = pack([(s, _oracle_states(s)) for s in seqs], "cpu", torch.float32)
    mask = torch.ones(p.ids.shape[0], dtype=torch.bool) if region is None else region
    with torch.no_grad():
        proposed = block.draft_tokens(model, p, steps, None)
    return p, run_lengths(proposed, p, mask, steps)


@pytest.mark.parametrize("right,steps", [(99, 3), (99, 7), (0, 3), (1, 3), (2, 5), (4, 5)])
def test_each_round_accepts_what_the_construction_says(right, steps, monkeypatch):
    """Every anchor a with steps tokens after it recorded accepts min(right, steps) drafts; near a sequence's end
    only what is recorded is judged. In blocks of a few anchors too (the memory bound crossing sequences)."""
    seqs = _sequences([12, 9, 15])
    model = Oracle(right)
    p, (accepted, known) = _rounds(model, seqs, steps)
    want_acc = min(right, steps)
    for c in range(p.ids.shape[0]):  # anchor row c = a - 1
        left = int(p.end[c]) - (c + 2)  # recorded tokens after x_a
        assert int(known[c]) == max(0, min(steps, left))
        assert int(accepted[c]) == min(want_acc, int(known[c])), c
    monkeypatch.setattr(block, "ATTN_BYTES", 2000)
    assert block._chunk(model, p, steps + 1) < 4
    assert torch.equal(_rounds(model, seqs, steps)[1][0], accepted)


@pytest.mark.parametrize("right,steps", [(99, 3), (99, 6), (0, 3), (2, 4)])
def test_accept_length_on_sglangs_basis(right, steps):
    """accepted drafts + 1 per verify round: the block size B = steps + 1 when the draft copies the target,
    1 when it is always wrong, right + 1 for a partial match; the server's walk advances by accepted + 1."""
    seqs = _sequences([30, 26, 33])
    p, (accepted, known) = _rounds(Oracle(right), seqs, steps)
    walk, every, start = Walk(steps), Tally(steps), 0
    every.add_many(accepted.numpy(), known.numpy())
    for s in seqs:
        L = s.shape[0]
        mask = [0] * 3 + [1] * (L - 3)  # a 3-token prompt, then the response
        walk.add(accepted[start : start + L].numpy(), known[start : start + L].numpy(), mask)
        start += L
    want = min(right, steps) + 1
    assert walk.as_sglang_reports() == pytest.approx(want)
    assert every.accept_length() == pytest.approx(want)
    assert walk.histogram[min(right, steps)] == walk.rounds - sum(walk.histogram[: min(right, steps)])
    assert walk.rounds == sum(-(-(s.shape[0] - 4) // want) for s in seqs)  # rounds of want tokens each


def _explicit(net, ids, states, a: int, size: int) -> list[int]:
    """A server's round at anchor a of one request: the draft's KV holds rows 0..a-1 only, the block sits at a."""
    pos = torch.arange(a)
    kv = net.context(net.project(states[:a]), pos)
    logits = net(ids[a : a + 1], torch.tensor([a]), kv, torch.ones(1, a, dtype=torch.bool), size)
    return logits[0].argmax(-1).tolist()


@pytest.mark.parametrize("layers,steps", [(1, 3), (2, 5)])
def test_batched_blocks_equal_one_forward_per_anchor(layers, steps, monkeypatch):
    torch.manual_seed(layers)
    net = DFlashDraft(_cfg(layers)).eval()
    with torch.no_grad():  # small embeddings: the context, not the mask token, decides the proposals
        for name, w in net.named_parameters():
            if name.endswith("norm.weight"):
                w.copy_(1 + 0.2 * torch.randn(w.shape))
            else:
                w.normal_(0, 0.1 if name == "embed_tokens.weight" else 1.0)
    seqs = _sequences([11, 7, 14], seed=3)
    states = [torch.randn(s.shape[0], 32) for s in seqs]
    p = pack(list(zip(seqs, states)), "cpu", torch.float32)
    with torch.no_grad():
        got = block.block_tokens(net, p, steps, None)
        start, distinct = 0, set()
        for s, st in zip(seqs, states):
            for a in range(s.shape[0]):
                want = _explicit(net, s, st, a, steps + 1)
                assert got[start + a].tolist() == want, (start, a)
                distinct.add(tuple(want))
            start += s.shape[0]
        assert len(distinct) > 5  # no constant draft: the comparison can fail
        monkeypatch.setattr(block, "ATTN_BYTES", 3000)
        assert block._chunk(net, p, steps + 1) < 4
        assert torch.equal(block.block_tokens(net, p, steps, None), got)
        laid = block.draft_tokens(net, p, steps, None)
    for c in range(p.ids.shape[0] - 1):  # step k of anchor row c ran at row c + k (simulate's layout)
        for k in range(steps):
            if c + k < p.ids.shape[0]:
                assert int(laid[k, c + k]) == int(got[c + 1, k])


def test_a_block_draft_is_told_from_a_chain_draft_by_its_network():
    from sglang_eagle3_ext.draft.arch.llama.net import LlamaEagle3Draft

    llama = {**_cfg(), "draft_vocab_size": V, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}
    assert block.drafts_block(DFlashDraft(_cfg())) and not block.drafts_block(LlamaEagle3Draft(llama))
