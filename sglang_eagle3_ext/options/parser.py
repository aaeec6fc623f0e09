"""The parser's arguments derived from an options dataclass (`schema.flag` fields), and the namespace
read back into it: each flag of a command is declared once, on the field; `did you mean` for a mistyped flag."""

from __future__ import annotations

import argparse
import dataclasses
import difflib

from .schema import FIELD_DEFAULT, MISSING, flag_fields, flag_of, option_strings


def _kwargs(field: dataclasses.Field) -> dict:
    f = flag_of(field)
    kw: dict = {"help": f.help}
    names = option_strings(field)
    if names[0].lstrip("-").replace("-", "_") != field.name:
        kw["dest"] = field.name
    default = field.default if f.default == FIELD_DEFAULT else f.default
    if default is MISSING and field.default_factory is not MISSING:
        default = field.default_factory()
    if f.action:
        kw["action"] = f.action
    if default is not MISSING:
        kw["default"] = default
    for key in ("choices", "metavar", "nargs", "const"):
        if getattr(f, key) is not None:
            kw[key] = getattr(f, key)
    if callable(kw.get("choices")):  # a registry's names, read when the parser is built
        kw["choices"] = kw["choices"]()
    if f.type is not None:
        kw["type"] = f.type
    if f.required:
        kw["required"] = True
    return kw


def add_options(parser, options_type, only=None, skip=()) -> None:
    """The flags of `options_type`'s fields on `parser` (or an argument group), in declaration order; `only`
    names the fields to add here (the rest go elsewhere: a group, after a shared flag), `skip` those left out."""
    for field in flag_fields(options_type):
        if (only is not None and field.name not in only) or field.name in skip:
            continue
        kw = _kwargs(field)
        parser.add_argument(*option_strings(field), **kw).schema_field = f"{options_type.__name__}.{field.name}"
        hidden = {k: v for k, v in kw.items() if k not in ("metavar", "default", "required")}
        for old in flag_of(field).aliases:  # an old spelling: out of --help, never required
            extra = {}
            if not isinstance(old, str):  # (spelling, action): the opposite switch, at the flag's default
                old, extra = old[0], {"action": old[1], "default": kw.get("default")}
            alias = parser.add_argument(old, **{**hidden, "dest": field.name, "help": argparse.SUPPRESS, **extra})
            alias.schema_field = f"{options_type.__name__}.{field.name}"


def options_from(ns: argparse.Namespace, options_type, **extra):
    """`options_type` from the parsed namespace: every flag field read back by name, plus `extra` (what the
    command line does not hold: callbacks, values the command worked out)."""
    got = {f.name: getattr(ns, f.name) for f in flag_fields(options_type) if hasattr(ns, f.name)}
    return options_type(**{**got, **extra})


def hand_added_duplicates(parser: argparse.ArgumentParser) -> list[str]:
    """One line per flag added by hand (add_argument) for a field the schema derives on the same parser: the
    same value declared twice, which the schema exists to prevent. Sub-parsers are walked too."""
    out, todo = [], [parser]
    while todo:
        p = todo.pop()
        derived = {a.dest: a.schema_field for a in p._actions if getattr(a, "schema_field", None)}
        for a in p._actions:
            if a.dest in derived and not getattr(a, "schema_field", None):
                out.append(f"{p.prog}: {'/'.join(a.option_strings) or a.dest} declares {derived[a.dest]} again")
            if isinstance(a, argparse._SubParsersAction):
                todo += list(a.choices.values())
    return out


def did_you_mean(flag: str, candidates) -> str:
    """'; did you mean --x?' for a mistyped or abbreviated flag ('' when nothing is close)."""
    name = flag.split("=", 1)[0]
    cands = list(candidates)
    near = [c for c in cands if c.startswith(name) and c != name][:3] or difflib.get_close_matches(name, cands, n=1)
    return f"; did you mean {' or '.join(near)}?" if near else ""


def _long_flags(parser: argparse.ArgumentParser) -> list[str]:
    out, todo = [], [parser]
    while todo:
        p = todo.pop()
        out += [s for s in p._option_string_actions if s.startswith("--")]
        todo += [c for a in p._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices.values()]
    return sorted(set(out))


def near_miss(parser: argparse.ArgumentParser, argv, message: str) -> str:
    """`did you mean` for the first flag of the command line `argv` that `parser` (or a sub-parser) does not know:
    a mistyped flag may be why an argument is missing, or left unrecognized ('' when the usage error `message`
    already says it)."""
    known = _long_flags(parser)
    typed = [t.split("=", 1)[0] for t in argv if isinstance(t, str) and t.startswith("--")]
    unknown = [t for t in typed if t not in known]
    if not unknown or "did you mean" in message:
        return ""
    hint = did_you_mean(unknown[0], known)
    return hint if unknown[0] in message else f"; {unknown[0]}: {hint[2:]}" if hint else ""
