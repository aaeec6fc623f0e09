"""train --draft-arch dflash (training/dflash/): speculators' DFlash draft trained on the tiny DeepSeek-V3 target's
real hidden states (the world of test_train_draft.py) learns and is saved in speculators' format, which `convert`
turns into SGLang's layout and `check` passes; a run stopped after its first epoch and resumed ends at the
uninterrupted run's weights; `--dry-run` counts the draft the route builds and refuses what the run refuses; and
`build --draft-arch dflash` goes from a dump of a DFlash draft's layers through every stage."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV3ForCausalLM"):
    pytest.skip("transformers has no DeepseekV3ForCausalLM", allow_module_level=True)

from safetensors.torch import load_file  # noqa: E402
from test_train_draft import world  # noqa: E402,F401 - the shared module fixture
from train_world import AUX, SMALL, train_args, train_on_cpu, write_samples  # noqa: E402

from sglang_eagle3_ext import envs  # noqa: E402
from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError, TrainOptions, train_draft  # noqa: E402
from sglang_eagle3_ext.training.checkpoint import CKPT_DIR, TrainingStopped  # noqa: E402

# the DFlash body speculators saves (the embedding, the heads and the verifier's norm are the target's)
BODY = {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
    f"layers.0.{k}.weight"
    for k in (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "self_attn.q_norm",
        "self_attn.k_norm",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
        "input_layernorm",
        "post_attention_layernorm",
    )
}
FLAGS = ["--draft-arch", "dflash", "--mask-token-id", "0", "--block-size", "4", "--max-anchors", "128"]


def _train(data, target, out, *extra):
    return train_on_cpu(data, target, out, *FLAGS, *extra)


def test_dflash_draft_learns_and_converts_to_sglangs_layout(world, tmp_path):
    from sglang_eagle3_ext.draft.check import check_draft
    from sglang_eagle3_ext.draft.convert import convert

    out = world["root"] / "out_dflash"
    r = _train(world["data"], world["target"], out, "--steps", "40", "--lr", "3e-3")
    assert r["steps"] == 40 and r["layer_ids"] == AUX and r["block_size"] == 4 and r["mask_token_id"] == 0
    first = sum(h["full_acc_0"] for h in r["history"][:3]) / 3
    last = sum(h["full_acc_0"] for h in r["history"][-5:]) / 5
    assert last > first + 0.1 and r["final_loss"] < r["first_loss"], (first, last, r["first_loss"], r["final_loss"])
    assert len(r["train_acc_by_step"]) == 3  # one accuracy per drafted position of a block of 4
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "dflash" and cfg["aux_hidden_state_layer_ids"] == AUX
    assert cfg["block_size"] == 4 and cfg["mask_token_id"] == 0 and cfg["draft_vocab_size"] == SMALL["vocab_size"]
    assert cfg["transformer_layer_config"]["model_type"] == "qwen3"
    n_target = json.loads((world["target"] / "config.json").read_text())["num_hidden_layers"]
    assert cfg["num_target_layers"] == n_target  # SGLang bounds target_layer_ids by it (not the draft's 1 layer)
    saved = load_file(str(out / "model.safetensors"))
    assert set(saved) == BODY and all(v.dtype == torch.bfloat16 for v in saved.values())

    draft = convert(out, tmp_path / "draft", log=lambda *_: None)
    sg = json.loads((draft / "config.json").read_text())
    assert sg["architectures"] == ["DFlashDraftModel"]
    assert sg["dflash_config"]["target_layer_ids"] == [i - 1 for i in AUX]  # SGLang captures id + 1
    assert sg["dflash_config"]["num_target_layers"] == n_target
    rep = check_draft(draft, world["target"])
    assert rep.checked and not rep.errors, rep.render()


def _opts(root, out, **kw) -> TrainOptions:
    run = dict(epochs=2, global_batch=2, total_seq_len=128, num_workers=0, min_val_acc=0, log_every=100)
    run.update(device="cpu", draft_arch="dflash", mask_token_id=5, block_size=4, max_anchors=16)
    return TrainOptions(data=root / "data", target=root / "target", out=out, **{**run, **kw})


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """21 random samples of the tiny target and the one-process run every other run is compared with."""
    root = tmp_path_factory.mktemp("dflash_small")
    ensure_tiny_target(root / "target", **SMALL)
    write_samples(root / "data", 21, lambda i: 20 + (i * 7) % 30, seed_each=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun rank runs (OMP_NUM_THREADS=1)
    try:
        train_draft(_opts(root, root / "one"))
    finally:
        torch.set_num_threads(threads)
    return root


def _same_weights(a, b) -> None:
    fa = load_file(str(a / CKPT_DIR / "1" / "model.safetensors"))
    fb = load_file(str(b / CKPT_DIR / "1" / "model.safetensors"))
    assert sorted(fa) == sorted(fb) and all(torch.equal(fa[k], fb[k]) for k in fa)


def test_a_dflash_run_resumed_after_its_first_epoch_ends_at_the_uninterrupted_weights(small, tmp_path, monkeypatch):
    """The anchors are random draws: seeded by each micro-batch's place in the run, a resumed run draws the
    uninterrupted run's."""
    monkeypatch.setenv(envs.TRAIN_STOP_AFTER_EPOCHS, "1")
    with pytest.raises(TrainingStopped, match="--resume"):
        train_draft(_opts(small, tmp_path / "two"))
    monkeypatch.delenv(envs.TRAIN_STOP_AFTER_EPOCHS)
    with pytest.raises(TrainDraftError, match="--block-size is 8 but the checkpoint was trained with 4"):
        train_draft(_opts(small, tmp_path / "two", resume=True, block_size=8))
    r = train_draft(_opts(small, tmp_path / "two", resume=True))
    assert r["steps"] == len(r["history"]) == 6 and r["history"][0]["step"] == 1
    _same_weights(small / "one", tmp_path / "two")


def test_two_ranks_under_torchrun_train_the_one_process_draft(small, tmp_path):
    """Each micro-batch draws the same anchors on whichever rank takes it: the FSDP run equals one process."""
    import os
    import subprocess
    import sys

    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"]
    argv += ["sglang_eagle3_ext", "train", *train_args(small / "data", small / "target", tmp_path / "out")]
    argv += ["--device", "cpu", "--epochs", "2", "--global-batch", "2", "--total-seq-len", "128", "--num-workers"]
    argv += ["0", "--min-val-acc", "0", "--log-every", "100", "--draft-arch", "dflash", "--mask-token-id", "5"]
    argv += ["--block-size", "4", "--max-anchors", "16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("DONE steps=6") == 1 and "training on 2 processes (torchrun, gloo)" in p.stderr
    _same_weights(small / "one", tmp_path / "out")


def _plan(target, *extra):
    args = train_cli.build_parser().parse_args(["--dry-run", "--target", str(target), "--draft-arch", "dflash", *extra])
    return train_draft(train_cli.options_from_args(args))


@pytest.mark.parametrize("layers, ids", [("1", None), ("2", "1,3"), ("3", "1,2,3")])
def test_the_plan_counts_the_draft_the_route_builds(tmp_path, layers, ids):
    from sglang_eagle3_ext.training.dflash import config as C
    from sglang_eagle3_ext.training.target_view import text_config

    target = ensure_tiny_target(tmp_path / "target", **SMALL)
    p = _plan(target, "--mask-token-id", "0", "--num-layers", layers, *(["--layer-ids", ids] if ids else []))
    a = TrainOptions(data=None, target=target, out=None, num_layers=int(layers), layer_ids=ids, mask_token_id=0)
    tcfg = text_config(target)
    hf = C.layer_ids_for(a, SMALL["num_hidden_layers"], None)[0]
    model = C.meta_model(C.draft_layer_config(tcfg, a), tcfg, hf, a, 0, target)
    trained = sum(x.numel() for x in model.parameters() if x.requires_grad)
    assert p["params"] == {
        "total": sum(x.numel() for x in model.parameters()),
        "trainable": trained,
        "frozen": sum(x.numel() for x in model.parameters()) - trained,
    }
    assert p["arch"] == "dflash" and p["per_rank_bytes"]["activations"] > 0


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--mask-token-id", "0", "--draft-vocab-size", "100"], "trains the full target vocabulary"),
        (["--mask-token-id", "256"], "--mask-token-id 256: outside the target's vocabulary [0, 255]"),
        ([], "--mask-token-id: "),  # the tiny target has no tokenizer to take one from
        (["--mask-token-id", "0", "--layer-ids", "0,2"], "must be distinct HF hidden_states indices in [1, 3]"),
        (["--mask-token-id", "0", "--layer-ids", "2,4"], "must be distinct HF hidden_states indices in [1, 3]"),
        (["--mask-token-id", "0", "--num-layers", "2"], "--num-layers 2: SGLang's DFlash rule picks"),
        (["--mask-token-id", "0", "--train-ratio", "1"], "--train-ratio 1"),
    ],
)
def test_the_plan_refuses_what_the_run_refuses(tmp_path, extra, words):
    target = ensure_tiny_target(tmp_path / "target", **SMALL)
    with pytest.raises(TrainDraftError) as e:
        _plan(target, *extra)
    assert words in str(e.value)


def test_build_dflash_from_a_dump_of_its_layers_through_every_stage(tmp_path, capsys):
    from sglang_eagle3_ext.cli import build as build_cli
    from sglang_eagle3_ext.cli import tiny
    from sglang_eagle3_ext.cli.common import run_tool

    dump = tmp_path / "dump"
    argv = [str(tmp_path / "target"), "--predictable", "--sample-dump", str(dump), "--samples", "12"]
    assert run_tool("tiny", tiny.main, [*argv, "--max-new-tokens", "8", "--dump-layers", "dflash:1"]) == 0
    assert json.loads((dump / "dump_meta.json").read_text())["layer_indices_hf"] == [3]  # SGLang's id 2, + 1
    out = tmp_path / "out"
    run = [*FLAGS, "--device", "cpu", "--steps", "2", "--total-seq-len", "128", "--num-workers", "0"]
    rc = run_tool(
        "build",
        build_cli.main,
        [
            "--dump-dir",
            str(dump),
            "--target",
            str(tmp_path / "target"),
            "--out",
            str(out),
            *run,
            "--min-val-acc",
            "0",
            "--eval-dtype",
            "fp32",
            "--quiet",
            "--json",
            str(tmp_path / "rep.json"),
        ],
    )
    assert rc == 0, capsys.readouterr().err[-3000:]
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["check"] is True and json.loads((out / "check.json").read_text())["ok"] is True
    sg = json.loads((out / "draft" / "config.json").read_text())
    assert sg["architectures"] == ["DFlashDraftModel"] and sg["dflash_config"]["target_layer_ids"] == [2]
    assert "--speculative-algorithm DFLASH" in rep["serve"]["launch"]


@pytest.mark.parametrize("arch", ["llama", "mla"])
@pytest.mark.parametrize("flag", ["--block-size", "--mask-token-id", "--max-anchors"])
def test_a_one_token_route_refuses_a_block_drafts_settings(tmp_path, arch, flag):
    target = ensure_tiny_target(tmp_path / "target", **SMALL)
    args = train_cli.build_parser().parse_args(["--dry-run", "--target", str(target), "--draft-arch", arch, flag, "4"])
    with pytest.raises(TrainDraftError, match=f"{flag} is a block draft's setting .*--draft-arch {arch} drafts one"):
        train_draft(train_cli.options_from_args(args))
