"""Kimi-K2.5's draft class on a real SGLang server (GPU host; tests/gpu/run.sh, SGLang 0.5.16 and 0.5.14).

- an MLA EAGLE-3 draft (`Eagle3DeepseekV2ForCausalLM`: MLA attention over cat(embeds, hidden), dense MLP,
  fc over K=3 aux states) made for the tiny DeepSeek-V3 target by draft/tiny_mla_draft.py, converted (HF indices
  recorded), served with EAGLE3 steps 3 / topk 1 / 4 draft tokens: it answers, speculation ran, and the log
  shows our strict loader accounted for it under this class and the explicit capture layers ran. The draft
  is random: accept length ~1.00 is legitimate here, "serves" is the criterion;
- the same draft with a target that sends 1 x hidden (eagle_config.use_aux_hidden_state=false: SGLang never
  calls set_eagle3_layers_to_capture) fails loudly -- at start-up, and with the start-up check deferred, from
  the forward guard on Eagle3MLAModel.forward -- never served at accept length 1.00.
"""

from __future__ import annotations

import pytest
from gpu_helpers import LOG_DIR, free_port, generate, sglang_server
from test_draft_gpu import _args, _env, _launcher, assert_width_refused, no_aux_draft

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("serve_backend")]
HF_INDICES = (1, 2, 3)  # HF hidden_states of the 4-layer tiny target
MLA_CLASS = "Eagle3DeepseekV2ForCausalLM"


@pytest.fixture(scope="module")
def mla_draft(tiny_target, tmp_path_factory):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft_for_tiny_target
    from sglang_eagle3_ext.versions import capabilities

    if not capabilities().HAS_MLA_DRAFT:
        pytest.skip(f"SGLang {capabilities().version} has no {MLA_CLASS}")
    root = tmp_path_factory.mktemp("mla_draft")
    src = make_mla_draft_for_tiny_target(root / "published", tiny_target, aux_ids=HF_INDICES)
    return convert(src, root / "sglang", hf_indices=list(HF_INDICES), log=print)


def test_mla_draft_loads_strictly_and_serves(tiny_target, mla_draft, tmp_path):
    with sglang_server(
        _args(tiny_target, mla_draft),
        name="mla_draft_eagle3",
        port=free_port(),
        env=_env(tmp_path),
        launcher=_launcher(),
    ) as (base, log, _):
        out = generate(base, list(range(10, 42)), max_new_tokens=32)
        assert len(out["output_ids"]) == 32
        verify = out["meta_info"].get("spec_verify_ct", 0)
        assert verify > 0  # speculative decoding ran with the MLA draft
        print(
            f"MLA draft served: 32 tokens, spec_verify_ct={verify}, "
            f"accept length {32 / verify:.2f} (random draft: ~1 is expected)"
        )
    text = log.read_text()
    (LOG_DIR / "mla_draft_summary.txt").write_text("\n".join(ln for ln in text.splitlines() if "EAGLE-3" in ln))
    assert f"({MLA_CLASS})" in text and "tensors loaded" in text, "strict loader did not run on the MLA draft"
    assert f"captures HF hidden_states{list(HF_INDICES)}" in text, "explicit capture layers did not run"


def test_mla_draft_target_sending_1xH_fails_at_startup(tiny_target, mla_draft, tmp_path):
    assert_width_refused(
        tiny_target, no_aux_draft(mla_draft, tmp_path), tmp_path, "mla_no_aux_startup", at_forward=False
    )


def test_mla_draft_target_sending_1xH_caught_by_forward_guard(tiny_target, mla_draft, tmp_path):
    assert_width_refused(tiny_target, no_aux_draft(mla_draft, tmp_path), tmp_path, "mla_no_aux_guard", at_forward=True)
