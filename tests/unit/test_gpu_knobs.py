"""The `SGE3_*` settings of the GPU tests, benchmarks and test scripts are declared once (tests/gpu/knobs.py):
every name the tests and benchmarks mention is in the table, every declared one is read somewhere, Python reads
them only through `knobs.get`, and tests/gpu/README.md shows the table as knobs.py prints it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "benchmarks")
NAME = re.compile(r"\bSGE3_[A-Z0-9_]*[A-Z0-9]\b")
DIRECT_READ = re.compile(
    r"os\.(?:environ(?:\.\w+)?|getenv)\s*[(\[]\s*[\"']SGE3_"
    r"|[\"']SGE3_\w+[\"']\s+(?:not\s+)?in\s+os\.environ"
)
# Read from the environment directly: shell has no knobs.get, and the CPU suite does not import tests/gpu/.
DIRECT_OK = {"tests/unit/compat/test_compat.py"}
THIS = Path(__file__).resolve()


def _load_knobs():
    spec = importlib.util.spec_from_file_location("gpu_knobs", REPO / "tests" / "gpu" / "knobs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


knobs = _load_knobs()
KNOBS_FILE = (REPO / "tests" / "gpu" / "knobs.py").resolve()


def _texts(root: Path, dirs=SCANNED):
    """(path relative to root, text) of every readable text file under `dirs`, but this test and knobs.py."""
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if not p.is_file() or "__pycache__" in p.parts or p.resolve() in (THIS, KNOBS_FILE):
                continue
            try:
                yield p.relative_to(root).as_posix(), p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue


def mentioned(root: Path) -> dict[str, set[str]]:
    """name -> the files that mention it."""
    out: dict[str, set[str]] = {}
    for rel, text in _texts(root):
        for name in NAME.findall(text):
            out.setdefault(name, set()).add(rel)
    return out


def read_by_code(root: Path) -> set[str]:
    """The names some Python or shell file mentions (a README row alone does not make a knob used)."""
    return {n for n, files in mentioned(root).items() if any(f.endswith((".py", ".sh")) for f in files)}


def direct_reads(root: Path) -> list[str]:
    """Python lines reading an SGE3_ name from the environment rather than through knobs.get."""
    hits = []
    for rel, text in _texts(root):
        if rel.endswith(".py") and rel not in DIRECT_OK:
            hits += [
                f"{rel}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if DIRECT_READ.search(line)
            ]
    return hits


def test_every_name_in_tests_and_benchmarks_is_declared():
    undeclared = {n: sorted(f) for n, f in mentioned(REPO).items() if n not in knobs.KNOBS}
    assert not undeclared, f"declare these in tests/gpu/knobs.py: {undeclared}"


def test_every_declared_knob_is_read():
    unused = sorted(set(knobs.KNOBS) - read_by_code(REPO))
    assert not unused, f"declared in tests/gpu/knobs.py but read nowhere: {unused}"


def test_python_reads_the_knobs_only_through_knobs_get():
    hits = direct_reads(REPO)
    assert not hits, "read these through knobs.get:\n" + "\n".join(hits)


def test_readme_holds_the_table_knobs_prints():
    readme = (REPO / "tests" / "gpu" / "README.md").read_text(encoding="utf-8")
    assert knobs.markdown_table() in readme, "paste `python tests/gpu/knobs.py` into tests/gpu/README.md"


def test_each_knob_has_a_name_of_its_own_and_a_meaning():
    assert len(knobs.KNOBS) == len(knobs._TABLE)
    for k in knobs._TABLE:
        assert NAME.fullmatch(k.name) and k.meaning.strip() and "|" not in k.meaning, k


def test_the_checks_catch_what_they_look_for(tmp_path):
    stray, lost = "SGE3_" + "NOT_DECLARED", "SGE3_" + "BACKENDS"
    (tmp_path / "tests").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "tests" / "t.py").write_text(
        f'import os\nX = os.environ.get("{stray}")\nY = knobs.get("{stray}")\n'
        f'Z = os.environ["{stray}"] if "{stray}" in os.environ else 0\n'
    )
    (tmp_path / "benchmarks" / "README.md").write_text(f"`{lost}` only in prose\n")
    assert set(mentioned(tmp_path)) == {stray, lost}
    assert read_by_code(tmp_path) == {stray}
    assert [h.split(": ")[0] for h in direct_reads(tmp_path)] == ["tests/t.py:2", "tests/t.py:4"]


def test_get_reads_env_then_declared_default(monkeypatch):
    monkeypatch.delenv("SGE3_RT_SPEC_STEPS", raising=False)
    assert knobs.get("SGE3_RT_SPEC_STEPS") == "3"
    monkeypatch.setenv("SGE3_RT_SPEC_STEPS", "5")
    assert knobs.get("SGE3_RT_SPEC_STEPS") == "5"
    monkeypatch.setenv("SGE3_RT_SPEC_STEPS", "")  # empty counts as unset
    assert knobs.get("SGE3_RT_SPEC_STEPS") == "3"
    monkeypatch.delenv("SGE3_TP", raising=False)
    assert knobs.get("SGE3_TP") is None and knobs.get("SGE3_TP", "2") == "2"
    with pytest.raises(KeyError):
        knobs.get("SGE3_" + "TYPO")
    with pytest.raises(ValueError, match="declared default"):
        knobs.get("SGE3_RT_SPEC_STEPS", "4")  # one default per knob, in the table


def test_a_reader_gives_a_default_only_where_the_table_has_none():
    """knobs.get raises on a second default; the GPU code only runs on a GPU machine, so check its calls here."""
    call = re.compile(r"knobs\.get\(\s*[\"'](SGE3_\w+)[\"']\s*,")
    both = [
        f"{rel}: {n}"
        for rel, text in _texts(REPO)
        if rel.endswith(".py")
        for n in call.findall(text)
        if knobs.KNOBS[n].default is not None
    ]
    assert not both, f"these have a default in tests/gpu/knobs.py already: {both}"
