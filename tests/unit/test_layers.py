"""The floor plan holds: import-linter's contracts (.importlinter: the layer order of ARCHITECTURE.md, no import
cycle between sibling packages or modules), no module over 400 lines, no function over 80, and a package root
that holds only bootstrap, configuration, the patch table, the output-folder rule, the `cli/` wing and the
`python -m` shims."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "sglang_eagle3_ext"
ROOT_MODULES = {
    "__init__",
    "__main__",
    "_activate",
    "_startup_hook",
    "_log",
    "interrupts",
    "envs",
    "env_rules",
    "versions",
    "boundary",
    "json_file",  # the JSON files the package writes, --json PATH
    "diagnosis",  # what an error means: bad input, a broken environment, a bug
    "patch_table",
    "patching",
    "static_patch",
    "outdir",  # the one rule for output folders, below every feature that writes one
    "check",
    "convert",
    "launch_server",
    "train_draft",
}  # the last four: `python -m` shims
SHIMS = {"check", "convert", "launch_server", "train_draft"}


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter not installed (pip install '.[test]')")
    p = subprocess.run(
        [exe, "--config", str(ROOT / ".importlinter")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_function_over_80_lines():
    long = []
    for p in _modules():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80:
                long.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert not long, long


def test_package_root_holds_only_bootstrap_configuration_patches_and_cli():
    found = {p.stem for p in PKG.glob("*.py")}
    assert found <= ROOT_MODULES, sorted(found - ROOT_MODULES)


def test_root_shims_only_reexport_a_command():
    for name in SHIMS:
        tree = ast.parse((PKG / f"{name}.py").read_text())
        imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
        assert len(imports) == 1 and imports[0].module.startswith("cli."), name
        assert [a.name for a in imports[0].names] == ["main"], name
