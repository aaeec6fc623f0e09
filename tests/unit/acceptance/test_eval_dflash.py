"""`sglang-eagle3 eval` on a DFlash draft (SGLang's DFlashDraftModel layout), end to end on CPU, with weights whose
answer is known by construction.

The reading draft: every block position attends to the newest context row only (its keys carry one RoPE pair
whose score falls with distance, k_norm/q_norm gains make it sharp; the block's own keys are zero), and copies
that row's value -- x_{a+1}, which chunk 0 of row a-1's target states holds -- into the residual the target's
lm_head reads. So draft token 1 is right and every later one repeats it (wrong: no token follows itself):
at one step (block size 2) it copies the target's whole continuation (accept length 2 = B), at three it accepts
one draft per round (2.0, p = 1, 0). With o_proj zero it proposes the mask token's own argmax, token 0, which no
sequence holds: accept length 1.
"""

from __future__ import annotations

import json

import acceptance_world as W
import pytest
import torch
from safetensors.torch import save_file

from sglang_eagle3_ext.cli.common import run_tool

MASK = 0  # an even id: the sequences hold odd ids only (W.HOT)
GAIN = 21.0  # q_norm / k_norm: scores ~1250 * cos(0.05 * distance), about 8 nats between neighbouring rows


def _target(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(json.loads((W.write_target(d / "_cfg") / "config.json").read_text())))
    g = torch.Generator().manual_seed(3)
    embed = torch.zeros(W.V, W.H)
    embed[:, 18:] = torch.randn(W.V, W.H - 18, generator=g)  # nothing in the dims the attention reads
    embed[MASK] = 0
    embed[MASK, 17] = 1.0  # the query's one input
    head = torch.zeros(W.V, W.H)
    for j, t in enumerate(W.HOT):
        head[t, j] = 1.0  # residual dim j -> odd token HOT[j]
    save_file(
        {"model.embed_tokens.weight": embed, "lm_head.weight": head, "model.norm.weight": torch.ones(W.H)},
        str(d / "model.safetensors"),
    )
    return d


def _config(block: int = 4) -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": W.H,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": W.V,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 0.05**-4,  # RoPE pair 1 turns 0.05 rad per position
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "block_size": block,
        "dflash_config": {"target_layer_ids": [0, 1, 2], "mask_token_id": MASK, "num_target_layers": 4},
    }


def _tensors(reads: bool = True) -> dict:
    H, p = W.H, "layers.0."
    fc = torch.zeros(H, 3 * H)
    for j, t in enumerate(W.HOT):
        fc[j, t] = 1.0  # chunk 0's one-hot of x_{r+2} -> context dim j
    fc[16, H] = 1.0  # chunk 1's constant -> context dim 16, what the keys read
    q, k, v, o = torch.zeros(32, H), torch.zeros(16, H), torch.zeros(16, H), torch.zeros(H, 32)
    for h in range(4):
        q[8 * h + 1, 17] = 1.0
    for g in range(2):
        k[8 * g + 1, 16] = 1.0
        for e in range(8):
            v[8 * g + e, 8 * g + e] = 1.0
            o[8 * g + e, 16 * g + e] = 10.0 if reads else 0.0  # q heads 0 and 2 read kv heads 0 and 1
    return {
        "fc.weight": fc,
        "hidden_norm.weight": torch.ones(H),
        "norm.weight": torch.ones(H),
        p + "input_layernorm.weight": torch.ones(H),
        p + "post_attention_layernorm.weight": torch.ones(H),
        p + "self_attn.q_proj.weight": q,
        p + "self_attn.k_proj.weight": k,
        p + "self_attn.v_proj.weight": v,
        p + "self_attn.o_proj.weight": o,
        p + "self_attn.q_norm.weight": torch.full((8,), GAIN),
        p + "self_attn.k_norm.weight": torch.full((8,), GAIN),
        p + "mlp.gate_proj.weight": 0.1 * torch.ones(64, H),
        p + "mlp.up_proj.weight": 0.1 * torch.ones(64, H),
        p + "mlp.down_proj.weight": torch.zeros(H, 64),
    }


def _states(ids, p, gen):
    """Row p: chunk 0 = 3 * one-hot(x_{p+2}), chunk 1 = a constant, chunk 2 noise the draft ignores."""
    v = 0.3 * torch.randn(3 * W.H, generator=gen)
    v[: 2 * W.H] = 0
    v[ids[min(p + 2, len(ids) - 1)]] = 3.0
    v[W.H] = 1.0
    return v


def _draft(d, reads=True, **cfg):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({**_config(), **cfg}))
    save_file({k: t.contiguous() for k, t in _tensors(reads).items()}, str(d / "model.safetensors"))
    return d


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash_eval")
    target = _target(root / "target")
    seqs = W.sequences(10)
    return {
        "target": target,
        "seqs": seqs,
        "data": W.write_export(root / "export", seqs, target, aux_fn=_states),
        "draft": _draft(root / "draft"),
        "blind": _draft(root / "blind", reads=False),
    }


def _report(argv, capsys) -> dict:
    from sglang_eagle3_ext.cli.eval import main

    rc = run_tool("eval", main, [str(a) for a in [*argv, "--json", "-", "--dtype", "fp32", "--device", "cpu"]])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_a_draft_copying_the_continuation_accepts_the_whole_block(world, capsys):
    rep = _report(
        ["--draft", world["draft"], "--data", world["data"], "--steps", "1", "--heldout-fraction", "1"], capsys
    )
    assert rep["draft_class"] == "DFlashDraftModel"
    assert rep["positions"][0]["p"] == 1.0 and rep["predicted_accept_length"] == 2.0
    assert rep["anchors"] == sum(len(s) - 2 for s in world["seqs"])
    # the config's block size 4 is what a server uses by default: the report says which --steps predicts it
    assert any("block size 4" in n and "--steps 3 predicts" in n for n in rep["notes"]), rep["notes"]


def test_a_partial_match_accepts_its_prefix_plus_one(world, capsys):
    rep = _report(
        ["--draft", world["draft"], "--data", world["data"], "--steps", "3", "--heldout-fraction", "1"], capsys
    )
    assert [p["p"] for p in rep["positions"]][:2] == [1.0, 0.0]
    assert rep["predicted_accept_length"] == 2.0 == rep["accept_length_every_anchor"]
    assert rep["rounds"]["histogram"][1] == rep["rounds"]["rounds"]
    assert not any("block size" in n for n in rep["notes"])


def test_a_draft_that_is_always_wrong_accepts_one(world, capsys):
    rep = _report(
        ["--draft", world["blind"], "--data", world["data"], "--steps", "3", "--heldout-fraction", "1"], capsys
    )
    assert rep["positions"][0]["p"] == 0.0 and rep["predicted_accept_length"] == 1.0


def test_accept_by_steps_simulates_each_block_size(world):
    """tune's figures for steps 1..3 are eval's at each: the copying draft accepts its whole block at one step
    (2.0) and one draft per round after (2.0), which clamping one 3-step simulation would also give; the
    per-position figure at 3 steps is the 3-step block's."""
    from sglang_eagle3_ext.acceptance.by_steps import accept_by_steps
    from sglang_eagle3_ext.acceptance.evaluate import EvalOptions

    o = EvalOptions(draft=str(world["draft"]), data=str(world["data"]), device="cpu", dtype="fp32", heldout_fraction=1)
    r = accept_by_steps(o, 3)
    assert r["by_steps"] == {1: 2.0, 2: 2.0, 3: 2.0}
    assert r["positions"][:2] == [1.0, 0.0]


def test_the_tiny_target_and_a_tiny_dflash_draft_end_to_end(tmp_path, capsys):
    """The built-in tiny DeepSeek-V3 target's own states, dumped as a server dumps them (HF hidden_states 1..3:
    target_layer_ids 0..2 + 1), and a random two-layer DFlash draft for it (bf16 on disk): eval reads them as they
    are served and judges rounds of 7 drafts (its block of 8)."""
    from train_world import SMALL

    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target
    from sglang_eagle3_ext.tiny.dflash_draft import make_dflash_draft_for_tiny_target
    from sglang_eagle3_ext.tiny.sample_dump import write_sample_dump

    target = ensure_tiny_target(tmp_path / "target", **SMALL)
    assert write_sample_dump(target, tmp_path / "dump", samples=4, new_tokens=12, layers=[1, 2, 3], quiet=True) == 4
    draft = make_dflash_draft_for_tiny_target(tmp_path / "draft", target, (0, 1, 2))
    args = [
        "--draft",
        draft,
        "--data",
        tmp_path / "dump",
        "--target",
        target,
        "--steps",
        "7",
        "--heldout-fraction",
        "1",
    ]
    rep = _report(args, capsys)
    assert rep["draft_class"] == "DFlashDraftModel" and rep["target"] == str(target)
    assert "aux layers: HF hidden_states [1, 2, 3] (data and draft agree)" in rep["notes"]
    assert rep["rounds"]["rounds"] > 0 and len(rep["positions"]) == 7
    assert 1.0 <= rep["predicted_accept_length"] <= 8.0
    assert not any("block size" in n for n in rep["notes"])  # the draft's block size is 8


def test_each_steps_count_is_its_own_block(world, monkeypatch):
    """A block's proposals depend on its size: a draft right only in blocks of 2 accepts its block at one step and
    nothing at two or three. One 3-step simulation clamped to fewer steps (what holds for a chain) would say 1.0
    at one step."""
    from sglang_eagle3_ext.acceptance import by_steps, drafts
    from sglang_eagle3_ext.acceptance.evaluate import EvalOptions

    real = drafts.load

    def load(*a, **k):
        loaded = real(*a, **k)
        net, forward = loaded.model, loaded.model.forward

        def only_pairs(bonus, start, kv, visible, size=None):
            logits = forward(bonus, start, kv, visible, size)
            return logits if size == 2 else torch.zeros_like(logits)  # argmax 0: a token no sequence holds

        monkeypatch.setattr(net, "forward", only_pairs)
        return loaded

    monkeypatch.setattr(drafts, "load", load)
    o = EvalOptions(draft=str(world["draft"]), data=str(world["data"]), device="cpu", dtype="fp32", heldout_fraction=1)
    assert by_steps.accept_by_steps(o, 3)["by_steps"] == {1: 2.0, 2: 1.0, 3: 1.0}


def test_served_figures_beside_a_dflash_server(world, tmp_path, capsys):
    """--url against a DFLASH server (SGLang runs a block of B as one step of B draft tokens): its figures beside
    the prediction; a server of the other algorithm, or of another block size, refused in one line before any
    request."""
    from trust_client_servers import Replies

    seqs = world["seqs"][:2]
    masks = [[0] * 4 + [1] * (len(s) - 4) for s in seqs]
    ex = W.write_export(tmp_path / "ex", seqs, world["target"], masks=masks, aux_fn=_states)

    def reply(body):
        n = body["sampling_params"]["max_new_tokens"]
        full = next(s for s in seqs if s[:4] == body["input_ids"])
        rounds = -(-n // 2)  # one accepted draft + the bonus a round, as this draft does
        return {
            "output_ids": full[4 : 4 + n],
            "meta_info": {"completion_tokens": n, "spec_verify_ct": rounds, "spec_accept_histogram": [0, rounds]},
        }

    info = {
        "speculative_algorithm": "DFLASH",
        "speculative_num_steps": 1,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    srv = Replies({"/generate": reply, "/get_server_info": info})
    base = ["--draft", world["draft"], "--data", ex, "--heldout-fraction", "1", "--url", srv.url, "--steps", "3"]
    try:
        rep = _report([*base, "--concurrency", 1], capsys)
        s = rep["served"]
        assert s["accept_length"] == 2.0 == rep["predicted_accept_length"] and s["difference"] == 0
        assert s["implausible"] == [] and s["outputs_equal_recorded"] == 2
        for change, words in (
            ({"speculative_algorithm": "EAGLE3"}, "not DFLASH"),
            ({"speculative_num_draft_tokens": 8}, "a block of 4"),
        ):
            srv.routes["/get_server_info"] = {**info, **change}
            from sglang_eagle3_ext.cli.eval import main

            rc = run_tool("eval", main, [str(a) for a in [*base, "--device", "cpu"]])
            err = capsys.readouterr().err
            assert rc == 2 and words in err and len(err.strip().splitlines()) == 1, err
        assert len(srv.posts) == 2  # the refused runs sent nothing
    finally:
        srv.close()
