"""The launcher runs `check` on the EAGLE-3 draft before SGLang starts (dry-run shows it, a bad draft stops it).

Real SGLang parser of the installed release (the `sglang` mark); drafts made by the speculators library and converted by ours.
"""

from __future__ import annotations

import json

import pytest
from test_launch_dryrun import dry_run

pytestmark = pytest.mark.sglang
pytest.importorskip("speculators")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    from sglang_eagle3_ext.cli.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("precheck")
    spec = make_speculators_draft(
        root / "spec", hidden=64, vocab=128, draft_vocab=64, aux_ids=(1, 2, 3), dtype=torch.bfloat16
    )
    return {"speculators": spec, "converted": convert(spec, root / "sglang", log=lambda *a: None)}


def _args(draft):
    return [
        "--preset",
        "tiny",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft),
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]


def test_converted_draft_passes_and_the_decision_is_shown(tmp_path, drafts):
    out = dry_run(tmp_path, *_args(drafts["converted"])).stdout
    line = next(ln for ln in out.splitlines() if "draft pre-check" in ln)
    from sglang_eagle3_ext.versions import installed_version

    assert "passed" in line and f"tensors would load for SGLang {installed_version()}" in line


def test_unconverted_speculators_checkpoint_is_refused_naming_the_fix(tmp_path, drafts):
    p = dry_run(tmp_path, *_args(drafts["speculators"]), check=False)
    assert p.returncode != 0
    assert "the draft would not serve correctly" in p.stderr
    assert "speculators-format config" in p.stderr and "python -m sglang_eagle3_ext.convert" in p.stderr


def test_wrong_k_is_refused_and_skip_flag_overrides(tmp_path, drafts):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(drafts["converted"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 2]  # fc is 3 x hidden wide
    (bad / "config.json").write_text(json.dumps(cfg))
    p = dry_run(tmp_path, *_args(bad), check=False)
    assert p.returncode != 0 and "ERROR" in p.stderr, p.stderr[-2000:]
    assert dry_run(tmp_path, *_args(bad), "--skip-draft-check").returncode == 0


def test_no_draft_no_check(tmp_path):
    assert "draft pre-check" not in dry_run(tmp_path, "--preset", "tiny").stdout


def test_dtype_judged_only_when_auto_and_declared(tmp_path, drafts):
    """A wrapper target (text_config without dtype, top level bf16) vs an fp16-declared draft: refused under
    --dtype auto, fine under an explicit --dtype (draft and target then run alike); a target that declares no
    dtype anywhere is not judged."""
    import shutil

    from sglang_eagle3_ext.launch.draft_precheck import DraftCheckFailed, precheck
    from sglang_eagle3_ext.versions import installed_version

    bad = tmp_path / "fp16"
    shutil.copytree(drafts["converted"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["torch_dtype"] = "float16"
    (bad / "config.json").write_text(json.dumps(cfg))
    target = tmp_path / "target"
    target.mkdir()
    text = {
        "hidden_size": cfg["target_hidden_size"] or cfg["hidden_size"],
        "vocab_size": cfg["vocab_size"],
        "num_hidden_layers": 8,
    }
    (target / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16", "text_config": text}))
    v = installed_version()
    with pytest.raises(DraftCheckFailed, match="dtype"):
        precheck("EAGLE3", str(bad), str(target), v)
    assert precheck("EAGLE3", str(bad), str(target), v, dtype="bfloat16").value == "passed"
    (target / "config.json").write_text(json.dumps({"text_config": text}))
    assert precheck("EAGLE3", str(bad), str(target), v).value == "passed"


def _dflash_args(draft, *more):
    return [
        "--preset",
        "tiny",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        str(draft),
        *more,
    ]


@pytest.fixture(scope="module")
def dflash_draft(tmp_path_factory):
    from sglang_eagle3_ext.tiny.dflash_draft import make_dflash_draft

    return make_dflash_draft(tmp_path_factory.mktemp("dflash") / "d", block_size=8)


def test_dflash_draft_is_checked_under_dflash(tmp_path, dflash_draft):
    out = dry_run(tmp_path, *_dflash_args(dflash_draft)).stdout
    line = next(ln for ln in out.splitlines() if "draft pre-check" in ln)
    assert "passed" in line and "DFlashDraftModel" in line


@pytest.mark.parametrize("flag", ["--speculative-num-draft-tokens", "--speculative-dflash-block-size"])
def test_a_block_size_flag_other_than_the_drafts_is_refused(tmp_path, dflash_draft, flag):
    """SGLang serves the flag's block size over the draft's config without a word."""
    p = dry_run(tmp_path, *_dflash_args(dflash_draft, flag, "4"), check=False)
    assert p.returncode != 0 and f"{flag} 4, but the draft was trained on blocks of 8" in p.stderr, p.stderr[-2000:]
    assert dry_run(tmp_path, *_dflash_args(dflash_draft, flag, "8")).returncode == 0


def test_a_draft_under_the_other_algorithm_is_refused_naming_its_own(tmp_path, dflash_draft, drafts):
    p = dry_run(tmp_path, *_args(dflash_draft), check=False)
    assert p.returncode != 0 and "use --speculative-algorithm DFLASH" in p.stderr, p.stderr[-2000:]
    p = dry_run(tmp_path, *_dflash_args(drafts["converted"]), check=False)
    assert p.returncode != 0 and "use --speculative-algorithm EAGLE3" in p.stderr, p.stderr[-2000:]
