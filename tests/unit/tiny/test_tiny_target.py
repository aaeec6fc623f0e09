"""The built-in tiny targets (transformers' DeepseekV3ForCausalLM on CPU).

The round trip's PREDICTABLE target exists so that "speculation must not change greedy outputs" is a test
that can only fail for a real reason: its greedy continuations must not depend on bf16 rounding.
The default target must stay the plain random one the dump tests measured.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sglang_eagle3_ext.tiny.deepseek_v3 import PREDICTABLE, TINY_CONFIG, ensure_tiny_target  # noqa: E402


def _greedy(model, x, n=24):
    with torch.no_grad():
        return model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, pad_token_id=0)[
            :, x.shape[1] :
        ]


def test_predictable_target_greedy_walk_is_dtype_independent(tmp_path):
    d = ensure_tiny_target(tmp_path / "p", **PREDICTABLE)
    m = transformers.DeepseekV3ForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
    x = torch.randint(10, 4000, (4, 24), generator=torch.Generator().manual_seed(3))
    a = _greedy(m, x)
    b = _greedy(m.to(torch.bfloat16), x)
    assert torch.equal(a, b), "bf16 changed a greedy continuation of the predictable target"
    assert sum(len(set(r.tolist())) for r in a) / len(a) > 12, "the walk should visit many tokens, not loop"


def test_default_target_is_plain_random(tmp_path):
    d = ensure_tiny_target(tmp_path / "r")
    m = transformers.DeepseekV3ForCausalLM.from_pretrained(str(d), dtype=torch.float32)
    torch.manual_seed(0)
    ref = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**TINY_CONFIG))
    got, want = m.state_dict(), ref.state_dict()
    names = [n for n in want if n.endswith(("lm_head.weight", "o_proj.weight", "down_proj"))]
    assert len(names) >= 5, names
    for name in names:
        assert torch.equal(got[name], want[name].to(torch.bfloat16).float()), name


def test_pinned_routing_makes_moe_states_dtype_independent(tmp_path):
    """The GPU dump test's strict MoE variant relies on this: with routing pinned, bf16 vs fp32 hidden states
    agree per token >= 0.999 after the MoE layers (with random routers they do not: near-ties flip experts)."""
    d = ensure_tiny_target(tmp_path / "pinned", route_bias=1.0)
    m32 = transformers.DeepseekV3ForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
    m16 = transformers.DeepseekV3ForCausalLM.from_pretrained(str(d), dtype=torch.bfloat16).eval()
    x = torch.randint(10, 4000, (2, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = (m(x, output_hidden_states=True).hidden_states for m in (m32, m16))
    worst = min(torch.nn.functional.cosine_similarity(a[i], b[i].float(), dim=-1).min().item() for i in (2, 3, 4))
    assert worst >= 0.999, worst
