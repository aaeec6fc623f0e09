"""`.ci/quick` leaves out the tests tests/conftest.py marks `slow`: every entry of its SLOW list names a test that
exists (a renamed file or test would otherwise drop silently back into the quick subset)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _slow() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SLOW"]:
            return ast.literal_eval(node.value)
    raise AssertionError("tests/conftest.py has no SLOW")


@pytest.mark.parametrize("entry", _slow())
def test_each_slow_entry_names_a_test_that_exists(entry):
    path, _, name = entry.partition("::")
    assert (ROOT / path).is_file(), f"{path}: no such test file"
    if name:
        func = name.split("[", 1)[0]
        defined = {n.name for n in ast.walk(ast.parse((ROOT / path).read_text())) if isinstance(n, ast.FunctionDef)}
        assert func in defined, f"{path} has no {func}"


def test_quick_leaves_out_the_slow_tests():
    text = (ROOT / ".ci" / "quick").read_text()
    assert '-m "not slow and not gpu"' in text and "pytest" in text
