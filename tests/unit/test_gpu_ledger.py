"""The GPU ledger (tests/gpu/ledger.py): which stage still has to run on the code as it is, and the table it
renders into docs/results.md. Real git history of this checkout; no GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _ledger():
    spec = importlib.util.spec_from_file_location("gpu_ledger", REPO / "tests" / "gpu" / "ledger.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def ledger():
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("needs this checkout's git history")
    return _ledger()


def test_a_pass_at_the_current_code_is_not_pending_and_anything_else_is(ledger):
    stage = ledger.Stage("x", 1, "x", ("LICENSE",))  # a file no change touches
    head = _git("rev-parse", "HEAD")
    assert ledger.is_pending(stage, {"rc": 0, "commit": head}) is None
    assert ledger.is_pending(stage, None) == "never ran"
    assert "failed" in ledger.is_pending(stage, {"rc": 1, "commit": head})
    assert "unknown" in ledger.is_pending(stage, {"rc": 0, "commit": "0" * 40})
    root = _git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    changed = ledger.Stage("y", 1, "y", ("README.md",))
    assert "changed since" in ledger.is_pending(changed, {"rc": 0, "commit": root})


def test_record_merge_render_round_trip(ledger, tmp_path):
    figures = tmp_path / "report.json"
    figures.write_text(json.dumps({"speedup": 1.5}))
    stage = ledger.STAGES[0].name
    entry = ledger.record(stage, 0, [str(figures), str(tmp_path / "missing.json")], tmp_path / "out", "abc123")
    book = tmp_path / "ledger.json"
    merged = ledger.merge([str(tmp_path / "out")], book)
    assert merged[stage]["figures"] == {"report.json": {"speedup": 1.5}} and merged[stage]["commit"] == "abc123"
    assert json.loads(book.read_text()) == merged and entry.is_file()
    results = tmp_path / "results.md"
    results.write_text("# Results\n\ntext\n")
    ledger.render(merged, results)
    once = results.read_text()
    ledger.render(merged, results)  # a second render replaces its block, never appends another
    assert results.read_text() == once and once.count(ledger.BEGIN) == 1
    row = next(line for line in once.splitlines() if line.startswith(f"| {stage} "))
    assert "| 0 | abc123 |" in row


def test_unknown_stage_is_refused_by_name(ledger, tmp_path):
    with pytest.raises(SystemExit, match="unknown stage 'nope'"):
        ledger.record("nope", 0, [], tmp_path, None)
