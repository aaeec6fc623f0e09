"""ARCHITECTURE.md's "One module plus one registry line" counted from the source: for every draft layout, export
format and command that exists, the package files naming it specifically (importing its modules, or naming them
or their "module:attr" strings) are exactly the files the table says a new one touches; a layout's route and
network are found by their fixed roles, which the layout's registration holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import sglang_eagle3_ext
from sglang_eagle3_ext.cli.commands import COMMANDS
from sglang_eagle3_ext.draft import arch
from sglang_eagle3_ext.dump import exporters

PKG = "sglang_eagle3_ext"
ROOT = Path(sglang_eagle3_ext.__file__).parent
_DOTTED = re.compile(r"\.?[A-Za-z_][\w.]*(:\w+)?")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _file(module: str) -> str:
    """The package file of `sglang_eagle3_ext.a.b` (a/b.py, or a/b/__init__.py), relative to the package."""
    rel = Path(*module.split(".")[1:])
    return str(rel / "__init__.py") if (ROOT / rel).is_dir() else f"{rel}.py"


def names_in(path: Path) -> set[str]:
    """Every module and "module:attr" this file names: its imports, and its strings that are a dotted name with
    an attribute, one of the package's, a relative one (registries) or one of SGLang's."""
    pkg = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]

    def absolute(level: int, name: str | None) -> str:
        base = pkg.split(".")[: len(pkg.split(".")) - level + 1]
        return ".".join(base + ([name] if name else []))

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = absolute(node.level, node.module) if node.level else node.module
            out |= {mod} | {f"{mod}.{a.name}" for a in node.names} | {f"{mod}:{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value):
            s = node.value
            if not (":" in s or s.startswith((f"{PKG}.", ".", "sglang.srt."))):
                continue
            mod, _, attr = s.partition(":")
            if mod.startswith("."):
                mod = absolute(1, mod[1:])
            elif not mod.startswith(("sglang.", f"{PKG}.")):
                mod = f"{PKG}.{mod}"  # "cli.launch:main": a module of the package
            out |= {mod} | ({f"{mod}:{attr}"} if attr else set())
    return out


_NAMES = {str(p.relative_to(ROOT)): names_in(p) for p in sorted(ROOT.rglob("*.py"))}


def files_naming(*targets: str) -> set[str]:
    """The package files that name one of `targets` (a module, or a "module:attr"), each module's own file aside."""
    own = {_file(t) for t in targets if t.startswith(f"{PKG}.") and ":" not in t}
    return {
        f
        for f, names in _NAMES.items()
        if f not in own and any(n == t or n.startswith((f"{t}.", f"{t}:")) for t in targets for n in names)
    }


@pytest.mark.parametrize("name", list(arch.LAYOUTS))
def test_a_layout_touches_what_the_table_says(name):
    """A layout: its folder draft/arch/<layout>/ (the declaration, its network; its config rules optionally) and
    one registry line; the patch rows and the patch module of its SGLang class; optionally a tiny builder in
    tiny/<layout>_draft.py and a route of its own, training/<ROUTE>/ (its run and its plan step, by role)."""
    m = arch.get(name)
    folder = f"draft/arch/{name}/"
    sglang_module = m.SGLANG_CLASS.split(":")[0]
    patches = f"in_server/hooks/{sglang_module.rpartition('.')[2]}.py"  # what patch_table's rows for its class name
    touched = {_file(m.__name__), f"{folder}net.py"} | files_naming(m.__name__, sglang_module, m.SGLANG_CLASS)
    touched |= {patches} if (ROOT / patches).is_file() else set()
    table = {f"{folder}__init__.py", f"{folder}net.py", "draft/arch/__init__.py", "patch_table.py", patches}
    # the route is a folder (training/<ROUTE>/) another layout may share: what of it names the layout belongs to it
    route = f"training/{m.ROUTE}/"
    optional = {f"tiny/{name}_draft.py", f"{folder}fields.py"} | {f for f in touched if f.startswith(route)}
    assert m.__name__ == f"{PKG}.draft.arch.{name}" and (ROOT / folder / "net.py").is_file()
    assert all((ROOT / route / f"{role}.py").is_file() for role in arch.ROUTE_ROLES), route
    assert table <= touched, table - touched
    assert touched - table <= optional, touched - table


@pytest.mark.parametrize("name", list(exporters.FORMATS))
def test_an_export_format_touches_what_the_table_says(name):
    """An export format: its module in dump/exporters/, one FORMATS line."""
    module = f"{PKG}.dump.exporters{exporters.FORMATS[name].split(':')[0]}"
    assert {_file(module)} | files_naming(module) == {f"dump/exporters/{name}.py", "dump/exporters/__init__.py"}


# build forwards train's flags (it reads train's parser): the one command another command reads.
_READ_BY_ANOTHER = {"train": {"cli/build.py"}}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_a_command_touches_what_the_table_says(command):
    """A command: cli/<command>.py and its COMMANDS row; a `python -m` module other than cli.<command> is a shim
    (the commands that had an entry before cli/ keep it)."""
    module = f"{PKG}.{command.main.split(':')[0]}"
    entry = Path(*command.module.split("."))
    shim = (
        set()
        if command.module == f"cli.{command.name}"
        else {f"{entry}/__main__.py" if (ROOT / entry).is_dir() else f"{entry}.py"}
    )
    # its row names the command, whose main is the fixed role cli/<name>.py:main (cli/commands.register checks it)
    touched = {_file(module), "cli/commands.py"} | files_naming(module)
    assert _file(module) == f"cli/{command.name}.py" and command in COMMANDS
    table = {f"cli/{command.name}.py", "cli/commands.py"} | shim
    assert touched == table | _READ_BY_ANOTHER.get(command.name, set()), touched ^ table


def test_the_counter_sees_a_stray_import():
    """The count is able to fail: a module that imports a layout's network is counted as touched by it."""
    saved = _NAMES.get("refresh/run.py")
    _NAMES["refresh/run.py"] = {f"{PKG}.draft.arch.llama.net"}
    try:
        assert "refresh/run.py" in files_naming(f"{PKG}.draft.arch.llama.net")
    finally:
        _NAMES["refresh/run.py"] = saved
