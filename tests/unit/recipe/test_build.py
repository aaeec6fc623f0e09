"""`sglang-eagle3 build`: the plan at Kimi-K2.5 width on a CPU, the stages from a real (CPU-made) dump of the tiny
target through export, train, convert, check, eval and the report, resuming, `--from`, the config file, and a
real interrupt mid-training."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import train_world

from sglang_eagle3_ext.cli import build as build_cli
from sglang_eagle3_ext.cli.common import run_tool

pytest.importorskip("speculators")

KIMI = dict(
    architectures=["DeepseekV3ForCausalLM"],
    model_type="deepseek_v3",
    hidden_size=7168,
    num_hidden_layers=61,
    vocab_size=163840,
    num_attention_heads=64,
    num_key_value_heads=64,
    q_lora_rank=1536,
    kv_lora_rank=512,
    intermediate_size=18432,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    max_position_embeddings=262144,
)
# the tutorial's one-step CPU draft (train_world.CPU_TRAIN), evaluated in float32, quietly
CPU_TRAIN = [*train_world.CPU_TRAIN, "--eval-dtype", "fp32", "--quiet"]


def build(argv) -> int:
    return run_tool("build", build_cli.main, [str(a) for a in argv])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny predictable target and a real dump of it made on this CPU (`tiny --sample-dump`)."""
    from sglang_eagle3_ext.cli import tiny

    d = tmp_path_factory.mktemp("build")
    rc = run_tool(
        "tiny",
        tiny.main,
        [
            str(d / "target"),
            "--predictable",
            "--sample-dump",
            str(d / "dump"),
            "--samples",
            "12",
            "--max-new-tokens",
            "8",
        ],
    )
    assert rc == 0
    return {"target": d / "target", "dump": d / "dump"}


def _mtimes(out: Path) -> dict:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted(out.rglob("*")) if p.is_file()}


def _stage_lines(text: str) -> list[str]:
    return [ln.split("build: ", 1)[1] for ln in text.splitlines() if ln.startswith("build: stage ")]


def test_dry_run_plans_a_kimi_width_build_on_a_cpu_in_seconds(tmp_path, capsys):
    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(json.dumps(KIMI))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "input_ids": list(range(100))}) + "\n" for i in range(10)))
    t0 = time.monotonic()
    rc = build(
        [
            "--dry-run",
            "--target",
            tmp_path / "kimi",
            "--data",
            prompts,
            "--preset",
            "kimi-k25-dump-tp8-nvlink",
            "--generate",
            "--max-new-tokens",
            "156",
            "--out",
            tmp_path / "out",
            "--draft-arch",
            "mla",
            "--gpus",
            "8",
            "--device",
            "cuda",
            "--device-memory-gib",
            "141",
            "--json",
            tmp_path / "plan.json",
        ]
    )
    took = time.monotonic() - t0
    assert rc == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert took < 60, took  # building Kimi-width layers on a CPU would take minutes; 60 s holds at load 8 on 2 cores
    assert [s["stage"] for s in plan["stages"]] == ["dump", "export", "train", "convert", "check", "eval", "report"]
    assert plan["target_shape"] == {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840}
    # 10 prompts x (100 + 156) tokens x (3 aux layers + the last hidden) x 7168 x 2 bytes
    assert plan["dump"]["tokens"] == 2560 and plan["dump"]["bytes"] == 2560 * 4 * 7168 * 2
    assert plan["train"]["world_size"] == 8 and plan["train"]["per_rank_gib"]["total"] > 0
    assert all(s["expected"] == "not measured" for s in plan["stages"])
    assert not (tmp_path / "out").exists()  # a plan writes nothing


def test_build_from_a_dump_through_every_stage_then_resumes_and_redoes_from_train(world, tmp_path, capsys):
    out = tmp_path / "out"
    common = ["--dump-dir", world["dump"], "--target", world["target"], "--out", out, *CPU_TRAIN]
    assert build([*common, "--json", tmp_path / "rep.json"]) == 0
    err = capsys.readouterr().err
    lines = _stage_lines(err)
    assert lines[0].startswith("stage dump: skipped (--dump-dir")
    for s in ("export", "train", "convert", "check", "eval", "report"):
        assert f"stage {s}: started" in lines and any(ln.startswith(f"stage {s}: done in ") for ln in lines)
    for name in ("export", "train", "draft"):
        assert (out / name).is_dir()
    assert json.loads((out / "check.json").read_text())["ok"] is True
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep == json.loads((out / "report.json").read_text())
    assert rep["dump"]["samples"] == 12 and rep["dump"]["bytes"] > 0
    assert rep["training_curve"] and rep["training_curve"][0]["epoch"] == 1
    assert len(rep["accept_per_position"]) == 3 and rep["predicted_accept_length"] >= 1.0
    assert rep["serve"]["launch"].startswith("sglang-eagle3 launch ") and str(out / "draft") in rep["serve"]["launch"]
    assert "<table>" in (out / "report.html").read_text()
    cfg = (out / "build_config.yaml").read_text()
    assert "ttt-steps: 1" in cfg and "draft-vocab-size: 512" in cfg

    before = _mtimes(out)  # a re-run: every stage complete, nothing rewritten
    assert build(common) == 0
    lines = _stage_lines(capsys.readouterr().err)
    assert [ln for ln in lines if "skipped" not in ln] == [], lines
    after = _mtimes(out)
    assert {k: v for k, v in after.items() if k != "build_config.yaml"} == {
        k: v for k, v in before.items() if k != "build_config.yaml"
    }

    assert build([*common, "--lr", "0.002"]) == 2  # other settings: refused, naming what redoes them
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--from train" in err[0] and "--lr 0.001 -> 0.002" in err[0], err
    assert (out / "build_config.yaml").read_text() == cfg  # they built nothing

    assert build([*common, "--lr", "0.002", "--from", "train"]) == 0  # train and after it again; export kept
    lines = _stage_lines(capsys.readouterr().err)
    assert "stage export: complete, skipped" in lines
    assert [ln.split(":")[0] for ln in lines if ln.endswith("started")] == [
        "stage train",
        "stage convert",
        "stage check",
        "stage eval",
        "stage report",
    ]
    again = _mtimes(out)
    assert again["export/hidden_states/hs_0.safetensors"] == before["export/hidden_states/hs_0.safetensors"]
    assert again["draft/config.json"] != before["draft/config.json"]
    assert "lr: 0.002" in (out / "build_config.yaml").read_text()

    weights = next((out / "draft").glob("*.safetensors"))  # a draft truncated after its check is not reused
    os.truncate(weights, weights.stat().st_size // 2)
    assert build([*common, "--lr", "0.002"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--from check" in err[0] and "draft" in err[0], err
    assert build([*common, "--lr", "0.002", "--from", "convert", "--json", tmp_path / "rep.json"]) == 0
    assert json.loads((tmp_path / "rep.json").read_text())["check"] is True


def test_config_file_with_command_line_override_and_unknown_key_refused(world, tmp_path, capsys):
    cfg = tmp_path / "b.yaml"
    cfg.write_text("lr: 0.003\nmax-new-tokens: 96\nttt_steps: 2\nlayer-ids: [1, 2, 3]\n")
    a, resolved = build_cli.parse(["--config", str(cfg), "--ttt-steps", "1", "--out", "o"])
    assert a.lr == 0.003 and a.max_new_tokens == 96 and a.ttt_steps == 1 and a.layer_ids == "1,2,3"
    assert resolved["ttt_steps"] == 1 and resolved["lr"] == 0.003

    cfg.write_text("lr: 0.003\nmax-new-token: 96\n")
    assert (
        build(["--config", cfg, "--out", tmp_path / "o", "--dump-dir", world["dump"], "--target", world["target"]]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown key 'max-new-token'" in err and "did you mean 'max-new-tokens'" in err and str(cfg) in err
    cfg.write_text("lr: fast\n")
    assert build(["--config", cfg, "--out", tmp_path / "o"]) == 2
    assert "lr" in capsys.readouterr().err
    cfg.write_text("generate: 3\n")
    assert build(["--config", cfg, "--out", tmp_path / "o"]) == 2
    assert "expected true or false" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_real_interrupt_during_train_exits_130_naming_the_stage_and_a_rerun_resumes(world, tmp_path):
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext.cli.build",
        "--dump-dir",
        str(world["dump"]),
        "--target",
        str(world["target"]),
        "--out",
        str(out),
        *CPU_TRAIN,
    ]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "stage train: started" in line:
            time.sleep(1.0)
            p.send_signal(signal.SIGINT)
            break
    rest = p.stderr.read()
    p.wait(60)
    assert p.returncode == 130, "".join(seen) + rest
    last = rest.strip().splitlines()[-1]
    assert "interrupted; during stage train" in last and "again to resume" in last
    markers = {s: json.loads((out / ".build" / f"{s}.json").read_text())["state"] for s in ("export", "train")}
    assert markers == {"export": "done", "train": "started"}  # train resumes from the same settings

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "stage export: complete, skipped" in again.stderr and "stage train: resumed" in again.stderr
    assert (out / "report.json").is_file()


def test_select_by_predicted_accept_keeps_the_epoch_its_scores_rank_best(world, tmp_path):
    """build --select-by predicted-accept: every epoch scored with the --select-* settings, train/ holds the draft of
    the epoch the scores rank best (a tie keeps the earlier one), and the later stages use it."""
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "out"
    i = CPU_TRAIN.index("--steps")
    flags = [*CPU_TRAIN[:i], *CPU_TRAIN[i + 2 :], "--epochs", "2", "--keep-checkpoints"]
    select = ["--select-by", "predicted-accept", "--select-steps", "2", "--select-samples", "1"]
    assert build(["--dump-dir", world["dump"], "--target", world["target"], "--out", out, *flags, *select]) == 0
    sel = json.loads((out / ".build" / "train.json").read_text())["result"]["selection"]
    assert sel["select_by"] == "predicted-accept", sel
    assert (sel["criterion"]["steps"], sel["criterion"]["samples"]) == (2, 1), sel
    scores = [s["score"] for s in sel["scores"]]
    assert [s["epoch"] for s in sel["scores"]] == [1, 2] and all(s["steps"] == 2 for s in sel["scores"]), sel
    assert sel["kept_epoch"] == scores.index(max(scores)) + 1 and sel["kept_score"] == max(scores), sel
    kept = load_file(str(out / "train" / "model.safetensors"))

    def same(epoch: int) -> bool:  # the epoch's checkpoint (float32) as the draft stores it
        ckpt = load_file(str(out / "train" / "checkpoint" / str(epoch - 1) / "model.safetensors"))
        return all(torch.equal(v.to(kept[k].dtype), kept[k]) for k, v in ckpt.items())

    assert same(sel["kept_epoch"]) and not same(3 - sel["kept_epoch"])
    assert (out / "report.json").is_file()


def test_the_epoch_score_flags_need_predicted_accept_and_a_plan_takes_them(world, tmp_path, capsys):
    common = ["--dump-dir", world["dump"], "--target", world["target"], "--out", tmp_path / "out"]
    for extra in (["--select-steps", "2"], ["--select-by", "last", "--select-samples", "1"]):
        assert build([*common, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert f"error: {extra[-2]} applies to --select-by predicted-accept only; add it" in err[-1], err
    cfg = tmp_path / "b.yaml"
    cfg.write_text("select-samples: 1\n")
    assert build([*common, "--config", cfg]) == 2
    assert "--select-samples applies to --select-by predicted-accept only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    plan = ["--dry-run", *common, "--select-by", "predicted-accept", "--select-steps", "2"]
    assert build([*plan, "--json", tmp_path / "plan.json"]) == 0
    assert json.loads((tmp_path / "plan.json").read_text())["train"]
    assert build([*plan, "--train-ratio", "1"]) == 2  # nothing held out to score on: refused, as train refuses it
    assert "--train-ratio 1" in capsys.readouterr().err
