"""The Kimi-width predictable target (tiny.KIMI_PREDICTABLE) keeps the learnable greedy walk at hidden 7168.

The walk's top logit stands out by ~sqrt(hidden) * std(embed) / rms(state) standard deviations of the
other logits, and the residual branches grow with the width: PREDICTABLE's branch scale (0.1) measured
argmax == walk on 12 % of tokens at this width (margins down to 0), hence KIMI_PREDICTABLE's own scale.
Built in memory on CPU, with 2 routed experts instead of 16 (the routed mix is normalised: the branch
size does not depend on the count) so that it fits a CPU test (~1 min, ~5 GB).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sglang_eagle3_ext.tiny.deepseek_v3 import KIMI_PREDICTABLE, KIMI_WIDTH, build_model  # noqa: E402


def test_kimi_width_walk_has_a_wide_margin():
    assert KIMI_PREDICTABLE["hidden_size"] == 7168 and 8 <= KIMI_PREDICTABLE["num_hidden_layers"] <= 12
    assert {k: KIMI_PREDICTABLE[k] for k in KIMI_WIDTH} == KIMI_WIDTH
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # drawn in bf16 (as on the GPU): half the host memory
    try:
        m = build_model(device="cpu", **{**KIMI_PREDICTABLE, "n_routed_experts": 2, "num_experts_per_tok": 2}).eval()
    finally:
        torch.set_default_dtype(prev)
    perm = torch.randperm(m.config.vocab_size, generator=torch.Generator().manual_seed(1))  # build_model's seed + 1
    x = torch.randint(10, 4000, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = m(x).logits.float()[0]
    top2 = logits.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    walk = torch.argsort(perm)[x[0]]  # lm_head row v leans on embed[perm[v]]: next = perm^-1(token)
    assert torch.equal(logits.argmax(-1), walk), "greedy next token is not the walk's"
    print(f"\nKimi-width walk: worst top-1 margin {margin.min():.0f} (other logits: std {logits.std():.0f})")
    assert margin.min() > 2 * logits.std(), (margin.min().item(), logits.std().item())  # far above bf16 noise
