"""A trained lm_head that SGLang throws away is never counted as loaded.

draft_vocab_size null and untied: the release's draft classes set `load_lm_head_from_target`, and the EAGLE
worker's `init_lm_head` then calls `set_embed_and_head` with the target's head: a trained head in the
checkpoint is loaded and silently replaced. The loader, `check` and `convert` refuse it (naming the fix)
unless it equals the target's head, which they can only tell with the target's weights at hand.
Real SGLang classes (Llama and MLA drafts) on CPU.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from helpers import LLAMA, build_draft, checkpoint_tensors, load_draft

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.draft.arch import mla

pytestmark = pytest.mark.sglang


def _target(root, name, head=None):
    """A target dir: config.json, and (head given) a model.safetensors holding that lm_head."""
    from safetensors.torch import save_file

    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    t = write_target_config(root / name)
    if head is not None:
        save_file(
            {"lm_head.weight": head.contiguous(), "model.norm.weight": torch.ones(head.shape[1])},
            str(t / "model.safetensors"),
        )
    return t


@pytest.fixture(scope="module")
def llama_head_draft(ext, tmp_path_factory):
    """A converted Llama draft with the full-vocab trained head and draft_vocab_size null."""
    pytest.importorskip("speculators")
    from malformed_drafts import edit_config, edit_tensors

    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("llama_head")
    d = convert(make_speculators_draft(root / "spec", aux_ids=(2, 4, 6)), root / "conv", log=lambda *_: None)

    def full_head(t):
        t.pop("d2t"), t.pop("t2d", None)
        t["lm_head.weight"] = torch.randn(128, 64, generator=torch.Generator().manual_seed(3)) * 0.02

    edit_tensors(d, full_head)
    edit_config(d, lambda c: c.__setitem__("draft_vocab_size", None))
    return d


@pytest.fixture(scope="module")
def mla_head_draft(ext, tmp_path_factory):
    if not ext.caps.HAS_MLA_DRAFT:
        pytest.skip(f"SGLang {ext.version} has no {mla.ARCH}")
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    return make_mla_draft(tmp_path_factory.mktemp("mla_head") / "d", aux_ids=(2, 4, 6), draft_vocab=None)


CASES = [("llama_head_draft", LLAMA), ("mla_head_draft", mla.ARCH)]


@pytest.mark.parametrize("fixture,arch", CASES)
def test_discarded_trained_head_is_refused_by_loader_and_check(request, ext, tmp_path, fixture, arch):
    from sglang_eagle3_ext.draft.check import check_draft

    d = request.getfixturevalue(fixture)
    assert build_draft(d, arch).load_lm_head_from_target is True  # the release will replace whatever is loaded
    other = _target(tmp_path, "t", head=torch.randn(128, 64))
    for target in (_target(tmp_path, "no_weights"), other):  # undecidable / a different head
        with pytest.raises(E.DraftLoadError) as ei:
            load_draft(ext, d, target, arch)
        assert ei.value.codes == [E.HEAD_DISCARDED], str(ei.value)
        msg = str(ei.value)
        assert '"draft_vocab_size": 128' in msg and "convert" in msg
        rep = check_draft(d, target=target)
        assert rep.codes == [E.HEAD_DISCARDED], rep.render()
    assert "differs from the target's" in str(ei.value)


@pytest.mark.parametrize("fixture,arch", CASES)
def test_head_equal_to_the_targets_is_ignored_with_the_reason(request, ext, tmp_path, caplog, fixture, arch):
    from sglang_eagle3_ext import _log
    from sglang_eagle3_ext.draft.check import check_draft

    _log._said.difference_update({k for k in _log._said if k.startswith("draft-")})  # each said once per draft

    d = request.getfixturevalue(fixture)
    target = _target(tmp_path, "same", head=checkpoint_tensors(d)["lm_head.weight"].float())
    with caplog.at_level(logging.INFO, logger="sglang_eagle3_ext"):
        model = load_draft(ext, d, target, arch)
    assert model.load_lm_head_from_target is True
    said = [r.getMessage() for r in caplog.records]
    summary = next(m for m in said if "tensors loaded" in m)
    assert "1 ignored (lm_head.weight)" in summary, summary
    assert any("lm_head.weight not loaded: it equals the target's lm_head" in m for m in said), said
    rep = check_draft(d, target=target)
    assert not rep.errors and "lm_head.weight" in rep.ignored and "equals the target's" in rep.render()


@pytest.mark.parametrize("fixture,arch", CASES)
def test_convert_keeps_the_trained_head(request, ext, tmp_path, fixture, arch):
    """convert's fix: draft_vocab_size = vocab_size, so SGLang loads the trained head and keeps it."""
    from sglang_eagle3_ext.draft.check import check_draft
    from sglang_eagle3_ext.draft.convert import convert

    d = request.getfixturevalue(fixture)
    logs = []
    out = convert(d, tmp_path / "fixed", log=logs.append)
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 128
    assert any("draft_vocab_size" in line and "lm_head" in line for line in logs), logs
    assert not check_draft(out).errors
    model = load_draft(ext, out, _target(tmp_path, "t"), arch)
    assert model.load_lm_head_from_target is False
    torch.testing.assert_close(
        model.lm_head.weight.data.float(), checkpoint_tensors(d)["lm_head.weight"].float(), rtol=0, atol=0
    )


def test_fixed_by_hand_loads(ext, llama_head_draft, tmp_path):
    from malformed_drafts import edit_config

    d = tmp_path / "by_hand"
    shutil.copytree(llama_head_draft, d)
    edit_config(d, lambda c: c.__setitem__("draft_vocab_size", 128))
    model = load_draft(ext, d, _target(tmp_path, "t"), LLAMA)
    assert model.load_lm_head_from_target is False


def test_why_release_alone_throws_the_trained_head_away(ext, llama_head_draft):
    """The premise, on SGLang's own code: unpatched, the draft loads its trained head, then the EAGLE worker's
    init_lm_head installs the target's head in its place."""
    import types

    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    import sglang_eagle3_ext
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    sglang_eagle3_ext.revert()
    try:
        model = build_draft(llama_head_draft, LLAMA)
        model.load_weights(sglang_weights_iterator(llama_head_draft))  # silently fine
    finally:
        sglang_eagle3_ext.apply(["draft"])
    trained = checkpoint_tensors(llama_head_draft)["lm_head.weight"]
    assert torch.equal(model.lm_head.weight.data, trained)
    target_embed, target_head = torch.randn(128, 64), torch.randn(128, 64)
    target_model = types.SimpleNamespace(get_embed_and_head=lambda: (target_embed, target_head), lm_head=None)
    worker = types.SimpleNamespace(
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model=target_model)),
        draft_runner=types.SimpleNamespace(model=model),
        hot_token_id=None,
        speculative_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
    )
    EagleDraftWorker.init_lm_head(worker)
    assert model.lm_head.weight is target_head and not torch.equal(model.lm_head.weight, trained)
