"""EAGLE-3 draft on a real SGLang server (GPU host; run by tests/gpu/run.sh with SGLang 0.5.16 / 0.5.14).

- a draft built and saved with speculators for the tiny DeepSeek-V3 target (hidden 1024, vocab 4096,
  K=3 aux layers), converted, served with EAGLE3 steps 3 / topk 1 / 4 draft tokens: answers, and the
  log shows our strict loader and explicit capture layers ran;
- the target sending un-fused states (draft eagle_config.use_aux_hidden_state=false: SGLang then never
  calls set_eagle3_layers_to_capture) fails loudly with the fc-width message, at start-up and, with the
  start-up check deferred, from the forward guard itself — instead of serving at accept length 1.00.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from gpu_helpers import BASE_ARGS, LOG_DIR, REPO, activation_env, generate, sglang_server
from gpu_helpers import free_port as _port

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("serve_backend")]
HF_INDICES = (1, 2, 3)  # HF hidden_states of the 4-layer tiny target


def _launcher() -> str:
    return (
        "sglang_eagle3_ext.launch_server"
        if importlib.util.find_spec("sglang_eagle3_ext.launch_server")
        else "sglang.launch_server"
    )


def _env(tmp: Path, **extra) -> dict:
    return activation_env(tmp, **extra)


@pytest.fixture(scope="module")
def draft(tiny_target, tmp_path_factory):
    import torch

    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    cfg = json.loads((Path(tiny_target) / "config.json").read_text())
    root = tmp_path_factory.mktemp("draft")
    src = make_speculators_draft(
        root / "spec",
        hidden=cfg["hidden_size"],
        vocab=cfg["vocab_size"],
        draft_vocab=1024,
        aux_ids=HF_INDICES,
        heads=8,
        kv_heads=2,
        intermediate=2048,
        max_position_embeddings=cfg["max_position_embeddings"],
        dtype=torch.bfloat16,
    )
    return convert(src, root / "sglang", log=print)


def _args(target, draft_dir):
    return [
        "--model-path",
        str(target),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft_dir),
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        *BASE_ARGS,
    ]


def no_aux_draft(draft, tmp_path) -> Path:
    """A copy of `draft` whose config says use_aux_hidden_state false: the target then sends 1 x hidden."""
    d = tmp_path / "no_aux"
    shutil.copytree(draft, d)
    c = json.loads((d / "config.json").read_text())
    c["eagle_config"]["use_aux_hidden_state"] = False
    (d / "config.json").write_text(json.dumps(c, indent=2))
    return d


def test_speculators_draft_serves(tiny_target, draft, tmp_path):
    with sglang_server(
        _args(tiny_target, draft), name="draft_eagle3", port=_port(), env=_env(tmp_path), launcher=_launcher()
    ) as (base, log, _):
        out = generate(base, list(range(10, 42)), max_new_tokens=32)
        assert len(out["output_ids"]) == 32
        assert out["meta_info"].get("spec_verify_ct", 0) > 0  # speculative decoding actually ran
        # this draft is untrained: the acceptance benchmark must say so and exit non-zero
        import subprocess
        import sys

        b = subprocess.run(
            [
                sys.executable,
                "-m",
                "sglang_eagle3_ext.bench",
                "--url",
                base,
                "--num-prompts",
                "8",
                "--max-new-tokens",
                "32",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
        (LOG_DIR / "bench_untrained_draft.txt").write_text(b.stdout + b.stderr)
        assert b.returncode == 1 and "the draft is not being used" in b.stdout, b.stdout[-2000:]
    text = log.read_text()
    assert "EAGLE-3 draft" in text and "tensors loaded" in text, "strict loader did not run"
    assert f"captures HF hidden_states{list(HF_INDICES)}" in text, "explicit capture layers did not run"


def _run_expect_width_failure(tiny_target, draft_dir, tmp_path, name, **env):
    log_text = ""
    try:
        # past the launcher's own draft pre-check (it refuses this draft before SGLang starts, CPU-tested):
        # what is tested here is the guard inside SGLang's processes
        skip = ["--skip-draft-check"] if _launcher().startswith("sglang_eagle3_ext") else []
        with sglang_server(
            _args(tiny_target, draft_dir) + skip,
            name=name,
            port=_port(),
            env=_env(tmp_path, **env),
            launcher=_launcher(),
            timeout=300,
        ) as (base, log, _):
            try:  # the warm-up request normally trips it already; if not, a real request must
                generate(base, list(range(10, 42)), max_new_tokens=8)
            except Exception:  # noqa: BLE001
                pass
            log_text = log.read_text()
    except (RuntimeError, TimeoutError) as e:
        log_text = str(e)
    log_text += (LOG_DIR / f"{name}.log").read_text()
    return log_text


def assert_width_refused(tiny_target, bad_draft, tmp_path, name, *, at_forward: bool) -> None:
    """A target sending 1 x hidden to `bad_draft` (its fc wants 3 x): refused at start-up, or with the
    start-up check deferred, by the forward guard at the first target-fed batch; never accept len 1.00."""
    from sglang_eagle3_ext.in_server.draft.loader import DEFER_WIDTH_ENV

    env = {DEFER_WIDTH_ENV: "1"} if at_forward else {}
    text = _run_expect_width_failure(tiny_target, bad_draft, tmp_path, name, **env)
    want = "batch): the target sends 1024-wide hidden states" if at_forward else "not capturing aux hidden states"
    assert "[fc-width]" in text and want in text, text[-3000:]
    assert "accept len: 1.00" not in text


def test_target_not_capturing_fails_at_startup(tiny_target, draft, tmp_path):
    assert_width_refused(tiny_target, no_aux_draft(draft, tmp_path), tmp_path, "draft_no_aux_startup", at_forward=False)


def test_target_not_capturing_caught_by_forward_guard(tiny_target, draft, tmp_path):
    assert_width_refused(tiny_target, no_aux_draft(draft, tmp_path), tmp_path, "draft_no_aux_guard", at_forward=True)
