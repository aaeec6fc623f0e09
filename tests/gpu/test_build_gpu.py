"""`sglang-eagle3 build` on a GPU: from a prompts file to a served draft in one command on the tiny predictable
target -- the dumping server it starts and stops, training interrupted once (a real SIGINT) and resumed by the
same command -- then the draft served with the command the report gives: accept length >= 3.5 and greedy outputs
identical to the target alone. About 5 minutes on an H200."""

from __future__ import annotations

import json
import random
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import LOG_DIR, REPO, free_port, generate, http_json, sglang_server

pytestmark = pytest.mark.gpu

PROMPTS = REPO / "docs" / "examples" / "tiny_prompts.jsonl"
MIN_ACCEPT = 3.5
N_CHECK, NEW_TOKENS = 16, 64
GRAPHS = ["--cuda-graph-max-bs", "16"]


def _build_cmd(work: Path, target: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sglang_eagle3_ext",
        "build",
        "--data",
        str(PROMPTS),
        "--target",
        str(target),
        "--preset",
        "tiny-dump",
        "--port",
        str(free_port()),
        "--generate",
        "--max-new-tokens",
        "96",
        "--concurrency",
        "64",
        "--out",
        str(work / "out"),
        "--epochs",
        "12",
        "--lr",
        "3e-3",
        "--loss-impl",
        "eager",
    ]


def test_build_prompts_to_a_served_draft_interrupted_and_resumed(tmp_path):
    from sglang_eagle3_ext.tiny.deepseek_v3 import PREDICTABLE, ensure_tiny_target

    target = ensure_tiny_target(tmp_path / "target", **PREDICTABLE)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    cmd = _build_cmd(tmp_path, Path(target))
    # the stage lines (stderr) and training's step lines (stdout) in one stream, in order
    first = subprocess.Popen(cmd, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    seen = []
    for line in first.stdout:  # an epoch checkpointed, then a real Ctrl-C mid-training
        seen.append(line)
        if "[train_draft] step" in line and " epoch 2 " in line:
            first.send_signal(signal.SIGINT)
            break
    rest = first.stdout.read()
    first.wait(120)
    (LOG_DIR / "build_first.log").write_text("".join(seen) + rest)
    assert first.returncode == 130, f"see {LOG_DIR / 'build_first.log'}"
    assert "interrupted; during stage train" in rest

    again = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    (LOG_DIR / "build_resumed.log").write_text(again.stderr)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "stage dump: complete, skipped" in again.stderr and "stage export: complete, skipped" in again.stderr
    assert "continuing from the checkpoint" in again.stderr

    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    launch = shlex.split(rep["serve"]["launch"])
    assert launch[:2] == ["sglang-eagle3", "launch"]
    rng = random.Random(0)
    prompts = [[rng.randrange(1000) for _ in range(rng.randint(16, 48))] for _ in range(N_CHECK)]
    with sglang_server([*launch[2:], *GRAPHS], name="build_draft", port=free_port()) as (base, log, _):
        spec = [generate(base, p, NEW_TOKENS)["output_ids"] for p in prompts]
        info = http_json(base + "/get_server_info")
    accept = [s.get("avg_spec_accept_length") for s in info.get("internal_states", [info])][0]
    with sglang_server(
        ["--preset", "tiny", "--model-path", str(target), *GRAPHS], name="build_target", port=free_port()
    ) as (base, _, _):
        plain = [generate(base, p, NEW_TOKENS)["output_ids"] for p in prompts]
    (LOG_DIR / "build_figures.json").write_text(
        json.dumps(
            {"accept": accept, "predicted": rep["predicted_accept_length"], "stage_seconds": rep["stage_seconds"]},
            indent=2,
        )
    )
    assert spec == plain, "greedy outputs differ with the draft"
    assert accept is not None and accept >= MIN_ACCEPT, (accept, f"see {log}")
