"""SGLang's server flags (`sglang serve --help`'s option strings), read statically from a release's
`srt/server_args.py` in a fraction of a second, without importing SGLang (which takes tens of seconds on a
CPU): `launch` tells a mistyped flag from one of SGLang's before anything is imported.

What `ServerArgs.add_cli_args` registers: every `A[T, ...]` / `Annotated[T, ...]` field of `ServerArgs`
(`--field-name`, or `Arg(cli_name=...)`, plus `Arg(aliases=[...])`; `Arg(no_cli=True)` registers none;
`action=BooleanOptionalAction` adds `--no-...`), and every `add_argument("--...")` in the file (the manual
entries, and every flag of releases before the annotated fields). `tests/unit/cli/test_cli_bad_input.py` holds
the result equal to the installed SGLang's own parser.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVER_ARGS = "srt/server_args.py"
# fewer flags than this: not a server_args.py this reader understands (every supported release has 300+)
MIN_FLAGS = 100


def _text(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _name(node) -> str | None:
    return getattr(node, "id", None) or getattr(node, "attr", None)


def _keyword(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _negated(names: list[str], action) -> list[str]:
    """BooleanOptionalAction's `--no-` spellings."""
    if action is None or _name(action) != "BooleanOptionalAction":
        return []
    return ["--no-" + n[2:] for n in names if n.startswith("--")]


def _field_flags(node: ast.AnnAssign) -> list[str]:
    ann = node.annotation
    if not (isinstance(ann, ast.Subscript) and isinstance(node.target, ast.Name)):
        return []
    if _name(ann.value) not in ("A", "Annotated") or not isinstance(ann.slice, ast.Tuple):
        return []
    meta = ann.slice.elts[1:]
    if not meta:
        return []
    names = ["--" + node.target.id.replace("_", "-")]
    arg = next((m for m in meta if isinstance(m, ast.Call) and _name(m.func) == "Arg"), None)
    if arg is None:
        return names
    no_cli = _keyword(arg, "no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return []
    cli_name = _keyword(arg, "cli_name")
    names = [_text(cli_name) or names[0]] if cli_name is not None else names
    aliases = _keyword(arg, "aliases")
    if isinstance(aliases, (ast.List, ast.Tuple)):
        names += [t for t in map(_text, aliases.elts) if t]
    return names + _negated(names, _keyword(arg, "action"))


def read_flags(server_args: Path) -> set[str] | None:
    """The option strings SGLang's server parser has, from its server_args.py; None when the file cannot be read
    or holds fewer flags than any release has (a layout this reader does not know)."""
    try:
        tree = ast.parse(server_args.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    flags = {"-h", "--help"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            for st in node.body:
                if isinstance(st, ast.AnnAssign):
                    flags.update(_field_flags(st))
        elif isinstance(node, ast.Call) and _name(node.func) == "add_argument":
            names = [t for t in map(_text, node.args) if t and t.startswith("-")]
            flags.update(names + _negated(names, _keyword(node, "action")))
    return flags if len(flags) >= MIN_FLAGS else None


def installed_flags() -> set[str] | None:
    """The installed SGLang's server flags (None: not installed, or not readable statically)."""
    from ..versions import sglang_root

    root = sglang_root()
    return read_flags(root / SERVER_ARGS) if root else None
