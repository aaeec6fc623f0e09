"""`refresh` of an MLA draft (Kimi-K2.x's layout): what training writes for it becomes a draft SGLang serves,
checked as the gate checks it (the Llama path runs end to end in test_refresh.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("speculators.train.cli")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV3ForCausalLM"):
    pytest.skip("transformers has no DeepseekV3ForCausalLM", allow_module_level=True)

from test_train_draft import world  # noqa: E402,F401 - the shared module fixture

from sglang_eagle3_ext.refresh.run import _servable  # noqa: E402
from sglang_eagle3_ext.training import TrainOptions, train_draft  # noqa: E402


def test_an_mla_draft_continued_by_refresh_is_servable(world, tmp_path):
    base = tmp_path / "served"
    common = dict(
        data=world["data"],
        target=world["target"],
        device="cpu",
        total_seq_len=512,
        num_workers=0,
        min_val_acc=0.0,
        ttt_steps=2,
    )
    train_draft(TrainOptions(out=base, draft_arch="mla", intermediate_size=96, steps=2, lr=1e-2, **common))
    trained = tmp_path / "train"
    summary = train_draft(TrainOptions(out=trained, init_from=str(base), steps=1, lr=1e-3, **common))
    assert summary["init_from"] == str(base)
    assert _servable(trained, tmp_path / "draft", str(world["target"])) == []
