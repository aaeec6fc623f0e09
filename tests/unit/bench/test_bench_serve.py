"""benchmarks/bench_serve.py's draft check: spec_on and spec_off must serve the same draft, i.e. plain
SGLang's own +1 rule must capture, from the converted draft's layer ids, the HF indices it was trained on."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("speculators")
pytest.importorskip("sglang")

REPO = Path(__file__).resolve().parents[3]


def _bench_serve():
    spec = importlib.util.spec_from_file_location("bench_serve", REPO / "benchmarks" / "bench_serve.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _converted(tmp_path, aux_ids) -> Path:
    from sglang_eagle3_ext.cli.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    src = make_speculators_draft(tmp_path / "spec", aux_ids=aux_ids)
    return convert(src, tmp_path / "sglang", progress=False, log=lambda *a: None)


def test_converted_draft_is_served_alike_by_plain_sglang(tmp_path):
    bs = _bench_serve()
    ec = bs.check_draft(_converted(tmp_path, (2, 3, 4)))
    assert ec["hf_hidden_state_indices"] == [2, 3, 4]


def test_draft_the_release_rule_would_shift_is_refused(tmp_path):
    bs = _bench_serve()
    d = _converted(tmp_path, (1, 2, 3))  # ids starting with 1: 0.5.14+ adds 1, capturing [2, 3, 4]
    with pytest.raises(SystemExit, match="plain SGLang would capture other layers"):
        bs.check_draft(d)


def test_unconverted_draft_is_refused_with_the_convert_command(tmp_path):
    bs = _bench_serve()
    d = tmp_path / "raw"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Eagle3DraftModel"]}))
    with pytest.raises(SystemExit, match="sglang_eagle3_ext.convert"):
        bs.check_draft(d)


def test_prompt_sets_are_fixed_and_distinct():
    bs = _bench_serve()
    assert bs.prompts_for(16, 2, 0) == bs.prompts_for(16, 2, 0) and len(bs.prompts_for(16, 2, 0)) == 32
    assert bs.prompts_for(1, 3, 0) != bs.prompts_for(1, 3, 1)


def test_random_draft_is_made_once_beside_the_target(tmp_path):
    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target

    bs = _bench_serve()
    target = ensure_tiny_target(tmp_path / "target", num_hidden_layers=8)
    d = bs.make_draft(target)
    assert d == tmp_path / "target-random-draft" / "sglang" and not d.with_name("sglang.partial").exists()
    assert bs.check_draft(d)["hf_hidden_state_indices"] == [2, 4, 5]  # what plain SGLang captures too
    stamp = (d / "config.json").stat().st_mtime_ns
    assert bs.make_draft(target) == d and (d / "config.json").stat().st_mtime_ns == stamp
