"""Where a patch target is defined in a SGLang source tree, found statically (ast), without importing SGLang.

`locate(root, spec)` follows `spec.target` ("sglang.mod:Class.method") the way Python would: the module
file, the class defined there or imported there from another sglang module, the method on the class or
inherited from a SGLang base. A target that is not where the table says is searched for in the whole
tree, so the caller can say where it moved. Used by `compat` (the pre-upgrade check) and
`patches/make_patches.py`.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from ..patch_table import PatchSpec


@dataclasses.dataclass
class Location:
    """Where a target's function is defined, statically."""

    status: str  # found | reachable | moved | missing
    detail: str = ""
    file: Path | None = None  # the file defining the function (found/reachable)
    node: ast.AST | None = None  # its FunctionDef
    inherited: bool = False  # defined on a base class, not on the target class itself


def module_file(root: Path, module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != "sglang":
        return None
    base = root.joinpath(*parts[1:])
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


_AST_CACHE: dict[Path, ast.Module] = {}


def _parse(path: Path) -> ast.Module | None:
    if path not in _AST_CACHE:
        try:
            _AST_CACHE[path] = ast.parse(path.read_text(errors="replace"), filename=str(path))
        except SyntaxError:
            return None
    return _AST_CACHE[path]


def _rel(root: Path, p: Path) -> str:
    try:
        return str(p.relative_to(root.parent))
    except ValueError:
        return str(p)


def _resolve_import(root: Path, path: Path, mod: str | None, level: int) -> str | None:
    if level == 0:
        return mod
    pkg = list(path.relative_to(root.parent).with_suffix("").parts[:-1])  # the importing module's package
    pkg = pkg[: len(pkg) - (level - 1)]
    return ".".join(pkg + ([mod] if mod else []))


def _find_class(root: Path, path: Path, name: str, depth: int = 0) -> tuple[Path, ast.ClassDef] | None:
    """ClassDef `name` as seen from module file `path`: defined there or imported from a sglang module."""
    tree = _parse(path)
    if tree is None or depth > 4:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return path, node
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == name:
                    mod = _resolve_import(root, path, node.module, node.level)
                    f = module_file(root, mod) if mod else None
                    if f is not None:
                        hit = _find_class(root, f, a.name, depth + 1)
                        if hit:
                            return hit
    return None


def _method_in(cls: ast.ClassDef, attr: str):
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            return node
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                return node
    return None


def _find_method(root, path, cls, attr, depth=0):
    """(file, class, node) defining attr on cls or its SGLang bases (depth-first, like the MRO for simple trees)."""
    node = _method_in(cls, attr)
    if node is not None:
        return path, cls, node
    if depth > 6:
        return None
    for b in cls.bases:
        bname = b.id if isinstance(b, ast.Name) else None
        if bname is None:
            continue
        hit = _find_class(root, path, bname)
        if hit:
            found = _find_method(root, hit[0], hit[1], attr, depth + 1)
            if found:
                return found
    return None


def _grep(root: Path, pattern: str, limit: int = 4) -> list[str]:
    rx = re.compile(pattern, re.M)
    out = []
    for p in sorted((root / "srt").rglob("*.py")) if (root / "srt").is_dir() else []:
        try:
            if rx.search(p.read_text(errors="replace")):
                out.append(_rel(root, p))
        except OSError:
            continue
        if len(out) >= limit:
            break
    return out


def locate(root: Path, spec: PatchSpec) -> Location:
    """Resolve spec.target in the source tree `root` (the `sglang` package dir) without importing it."""
    mod, _, qual = spec.target.partition(":")
    *owners, attr = qual.split(".")
    f = module_file(root, mod)
    if f is None:
        base = mod.rsplit(".", 1)[-1]
        elsewhere = [_rel(root, p) for p in sorted(root.rglob(f"{base}.py"))][:3]
        where = _grep(root, rf"^class {re.escape(owners[0])}\b") if owners else []
        hint = ("; module file now at " + ", ".join(elsewhere)) if elsewhere else ""
        hint += ("; class " + owners[0] + " defined in " + ", ".join(where)) if where else ""
        return Location("moved" if (elsewhere or where) else "missing", f"module {mod} not found{hint}")
    path, cls = f, None
    for i, name in enumerate(owners):
        hit = _find_class(root, path, name) if i == 0 else None
        if i > 0 and cls is not None:
            nested = [n for n in cls.body if isinstance(n, ast.ClassDef) and n.name == name]
            hit = (path, nested[0]) if nested else None
        if hit is None:
            where = _grep(root, rf"^\s*class {re.escape(name)}\b")
            return Location(
                "moved" if where else "missing",
                f"class {name} not in {mod}"
                + (f"; defined in {', '.join(where)}" if where else " nor anywhere in the tree"),
            )
        path, cls = hit
    if cls is None:
        return Location("missing", f"{spec.target}: no class in the target (module-level targets are not supported)")
    found = _find_method(root, path, cls, attr)
    if found is None:
        same_file = [n.name for n in _parse(path).body if isinstance(n, ast.ClassDef) and _method_in(n, attr)]
        hint = f"; `{attr}` is defined on {', '.join(same_file[:4])} in that file" if same_file else ""
        return Location("moved", f"{'.'.join(owners)}.{attr} not defined on the class or its SGLang bases{hint}")
    fpath, fcls, node = found
    inherited = fcls is not cls
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return Location(
            "reachable",
            f"{attr} is an assignment on {fcls.name} (line {node.lineno}), not a def",
            fpath,
            node,
            inherited,
        )
    a = node.args
    named = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
    gone = [p for p in spec.params if p not in named]
    if gone:  # the wrapper reads these by name (in_server/hooks/_bind.py)
        return Location(
            "moved",
            f"param {', '.join(gone)} gone from {fcls.name}.{attr} ({_rel(root, fpath)}:{node.lineno})",
            fpath,
            node,
            inherited,
        )
    if fpath == f and not inherited:
        return Location("found", f"{_rel(root, fpath)}:{node.lineno}", fpath, node)
    how = f"inherited from {fcls.name}" if inherited else f"class defined in {_rel(root, fpath)}"
    return Location("reachable", f"{how} ({_rel(root, fpath)}:{node.lineno})", fpath, node, inherited)


def clear_cache() -> None:
    """Forget parsed files (a new source tree is checked)."""
    _AST_CACHE.clear()
