"""Command-line flags declared once, on the options dataclass a feature takes: `flag(...)` is a field whose
metadata carries the flag's spelling, help, argparse type, choices, metavar and hidden aliases; `parser.py`
derives the parser's arguments from these fields (in declaration order) and reads the namespace back into the
dataclass. A field without `flag` has no command line.

The argparse types that check local paths, URLs and numbers are in `values.py`, so that a command line, a
`build --config` file and a launch preset check a value alike."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

MISSING = dataclasses.MISSING
FIELD_DEFAULT = "<the field's default>"  # Flag.default when the parser's default is the field's


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one field is spelled on the command line (`argparse.add_argument`'s keywords, the default the
    field's own)."""

    help: str
    names: tuple[str, ...] = ()  # option strings; empty: --FIELD-NAME
    type: Callable | None = None  # an argparse type; the checking ones are in options/values.py
    choices: Any = None  # or a function giving them when the parser is built (a registry that grows)
    metavar: str | None = None
    action: str | None = None  # store_true / store_false / append ...
    nargs: Any = None
    const: Any = None
    required: bool = False
    # old spellings, kept working and left out of --help; (spelling, action): one with an action of its own
    aliases: tuple[str | tuple[str, str], ...] = ()
    default: Any = FIELD_DEFAULT  # the parser's default when it differs from the field's


def flag(default: Any = MISSING, *, help: str, default_factory: Any = MISSING, **kw) -> Any:
    """A dataclass field that is also a command-line flag (`Flag`'s keywords; `parser_default=` for a parser
    default other than the field's)."""
    if "parser_default" in kw:
        kw["default"] = kw.pop("parser_default")
    for key in ("names", "aliases"):
        if isinstance(kw.get(key), str):
            kw[key] = (kw[key],)
    meta = {"flag": Flag(help=help, **kw)}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_of(field: dataclasses.Field) -> Flag | None:
    return field.metadata.get("flag")


def option_strings(field: dataclasses.Field) -> tuple[str, ...]:
    f = flag_of(field)
    if f is None:
        return ()
    return f.names or ("--" + field.name.replace("_", "-"),)


def flag_fields(options_type) -> list[dataclasses.Field]:
    """The fields of `options_type` that are command-line flags, in declaration order."""
    return [f for f in dataclasses.fields(options_type) if flag_of(f) is not None]
