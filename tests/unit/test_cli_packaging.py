"""Packaging: every third-party module the package imports is a declared dependency (base or an extra), the
LICENSE is the Apache-2.0 text the metadata declares, and the static patches travel in the wheel."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "sglang_eagle3_ext"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(proj["dependencies"]) + [r for extra in proj["optional-dependencies"].values() for r in extra]
    return {_norm(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) for r in reqs}


def _imported_modules() -> dict[str, str]:
    """top-level module -> first file importing it (absolute imports only; relative ones are ours)."""
    out: dict[str, str] = {}
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                out.setdefault(n.split(".")[0], str(f.relative_to(REPO)))
    return out


def test_every_import_is_declared():
    declared = _declared() | {"sglang-eagle3-ext"}
    dists = metadata.packages_distributions()
    missing = []
    for mod, where in _imported_modules().items():
        if mod in sys.stdlib_module_names or mod in ("sglang_eagle3_ext", "__future__"):
            continue
        owners = {_norm(d) for d in dists.get(mod, [])}
        if not owners & declared:
            missing.append(f"{mod} (imported in {where}; distribution {sorted(owners) or 'not installed'})")
    assert not missing, "imports without a declared dependency: " + "; ".join(missing)


def test_license_is_apache_and_declared():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert proj["license"] == {"text": "Apache-2.0"} and proj["license-files"] == ["LICENSE"]
    assert proj["scripts"]["sglang-eagle3"] == "sglang_eagle3_ext.cli:main"


def test_patches_are_package_data():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert cfg["force-include"]["patches/0.5.16"] == "sglang_eagle3_ext/patches/0.5.16"
    from sglang_eagle3_ext.cli import patches as patches_cli

    assert patches_cli.releases(), "no patches/<release>/sglang-eagle3-ext.patch found"
