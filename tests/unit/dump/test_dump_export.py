"""Exporters: synthetic native dump -> speculators (read back by speculators' own ArrowDataset) and
SpecForge (schema of scripts/prepare_hidden_states.py + specforge/data/preprocessing.py at a6b6b023)."""

from __future__ import annotations

import pytest
import torch
from helpers import _short_samples_allowed  # noqa: F401 (autouse fixture)

from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.export import ExportError, rms_norm
from sglang_eagle3_ext.dump.exporters.specforge import export_specforge
from sglang_eagle3_ext.dump.exporters.speculators import export_speculators
from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
from sglang_eagle3_ext.in_server.dump.writer.thread import DumpWriter

H, K = 8, 3


def _make_dump(tmp_path, final="prenorm", lens=(5, 7)):
    d = tmp_path / "dump"
    d.mkdir()
    meta = {
        "layer_indices_hf": [1, 2, 3],
        "hidden_size": H,
        "num_hidden_layers": 4,
        "final": final,
        "architecture": "DeepseekV3ForCausalLM",
        "dtype": "bfloat16",
    }
    w = DumpWriter(C.DumpConfig(str(d), (1, 2, 3), final=final), meta)
    weight = torch.rand(H) + 0.5
    truth = {}
    for j, L in enumerate(lens):
        aux = torch.randn(K, L, H).bfloat16()
        pre = torch.randn(L, H).bfloat16() * 3
        ids = torch.randint(0, 100, (L,))
        b = ChunkBatch(
            [f"s{j}"],
            [0],
            [L],
            [L],
            ids,
            aux,
            "list",
            pre=pre if final != "postnorm" else None,
            post=rms_norm(pre, weight, 1e-6) if final != "prenorm" else None,
            nbytes=10,
            norm=(weight, 1e-6) if j == 0 and final != "postnorm" else None,
        )
        w.reserve(10)
        w.submit(b)
        truth[f"s{j}"] = (ids, aux.transpose(0, 1).reshape(L, K * H), pre, rms_norm(pre, weight, 1e-6))
    assert w.flush(30)
    w.close()
    return d, truth


def test_speculators_export_read_by_speculators(tmp_path):
    pytest.importorskip("speculators")
    from speculators.train.data import ArrowDataset

    d, truth = _make_dump(tmp_path)
    out = tmp_path / "spec"
    order = ["s1", "s0"]
    masks = {"s1": [0, 0, 1, 1, 1, 1, 1]}
    assert export_speculators(d, out, order=order, loss_masks=masks) == 2
    ds = ArrowDataset(max_len=64, datapath=str(out), on_missing="raise")
    for i, sid in enumerate(order):
        ids, aux, pre, _ = truth[sid]
        item = ds._get_raw_data(i)
        assert torch.equal(item["input_ids"], ids)
        assert torch.equal(item["hidden_states"], aux)  # [L, 3H], layers in order
        assert torch.equal(item["verifier_last_hidden_states"], pre)  # final BEFORE the norm
        assert item["loss_mask"].tolist() == (masks.get(sid) or [1] * len(ids))
    full = ds[0]  # speculators' own __getitem__ (shift/position handling) also works
    assert full["hidden_states"].shape[-1] == K * H


def test_specforge_export_schema(tmp_path):
    d, truth = _make_dump(tmp_path)
    out = tmp_path / "sf"
    assert export_specforge(d, out) == 2
    for i, sid in enumerate(sorted(truth)):
        ids, aux, pre, post = truth[sid]
        path = out / "rows_0-2000" / f"data_{i}.ckpt"
        raw = torch.load(path, weights_only=False, mmap=True)  # as specforge/data/preprocessing.py loads it
        assert set(raw) == {"input_ids", "loss_mask", "hidden_state", "aux_hidden_state"}
        L = len(ids)
        assert raw["input_ids"].shape == (L,) and raw["loss_mask"].shape == (L,)
        assert raw["hidden_state"].shape == (1, L, H) and raw["aux_hidden_state"].shape == (1, L, K * H)
        assert torch.equal(raw["hidden_state"][0], post)  # AFTER the norm (derived from final_norm)
        assert torch.equal(raw["aux_hidden_state"][0], aux)
        # SpecForge's process_offline_eagle3_sample (specforge/data/preprocessing.py), verbatim logic:
        hidden_state = raw["aux_hidden_state"].squeeze(0)[:2048].unsqueeze(0)
        target = raw["hidden_state"].squeeze(0)[:2048].unsqueeze(0)
        assert hidden_state.shape == (1, L, K * H) and target.shape == (1, L, H)


def test_speculators_export_refuses_postnorm_only(tmp_path):
    d, _ = _make_dump(tmp_path, final="postnorm")
    with pytest.raises(ExportError, match="before the norm"):
        export_speculators(d, tmp_path / "o", arrow=False)
    assert export_specforge(d, tmp_path / "sf") == 2  # SpecForge needs only post-norm


def test_export_order_must_be_complete(tmp_path):
    d, _ = _make_dump(tmp_path)
    with pytest.raises(ExportError, match="not in the manifest"):
        export_specforge(d, tmp_path / "sf", order=["s0", "nope"])
