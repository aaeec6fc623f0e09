"""Validation at the boundary: every reader of outside input (JSON, YAML, safetensors headers, pickles,
HTTP replies, flags) checks the shape it needs here and raises `BadInput` naming *where* (file, key, flag,
URL) and *what* was expected. Nothing deeper trusts outside input. `BadInput` is a `ValueError`, so every
command line maps it to exit 2 (bad input), never 3 (a bug).

    cfg = read_json_file(path, "draft config")           # a regular file holding a JSON object
    n = field(cfg, "hidden_size", int, where=str(path), minimum=1)
    ids = field(reply, "output_ids", list, where=url, optional=True)

Imports nothing heavy.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Callable

_MISSING = object()


class Refused(Exception):
    """A refusal whose message already names the input and the fix. `code` is the exit code a command returns
    for it: 2 bad input or environment (the default), 1 a negative verdict. Features raise it; `cli/` maps it."""

    def __init__(self, msg: str, code: int = 2):
        super().__init__(msg)
        self.code = code


class BadInput(ValueError):
    """Outside input that is not what it must be; the message names where and what was expected."""

    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem
        super().__init__(f"{where}: {problem}" if where else problem)


def _type_name(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    names = {
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object (mapping)",
        type(None): "null",
    }
    return " or ".join(names.get(t, t.__name__) for t in types)


def check_type(value: Any, types, where: str) -> Any:
    """`value` if it is one of `types` (bool is never an int; an int is a float), else BadInput."""
    types = types if isinstance(types, tuple) else (types,)
    ok = isinstance(value, types)
    if isinstance(value, bool) and bool not in types:
        ok = False
    if not ok and float in types and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise BadInput(where, f"expected {_type_name(types)}, got {type(value).__name__} {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadInput(where, f"expected a finite number, got {value}")
    return value


def field(
    obj: Any,
    key: str,
    types,
    where: str,
    *,
    optional: bool = False,
    default: Any = None,
    minimum: float | None = None,
    maximum: float | None = None,
    nonempty: bool = False,
    choices: tuple | None = None,
    check: Callable[[Any], str | None] | None = None,
) -> Any:
    """obj[key], checked: `types`, inclusive bounds for numbers, non-empty strings/lists, one of `choices`,
    and `check(value)` returning a problem text or None. A missing (or null, when optional) key gives
    `default` if optional, else BadInput naming `where` and the key."""
    if not isinstance(obj, dict):
        raise BadInput(where, f"expected an object (mapping) holding {key!r}, got {type(obj).__name__}")
    value = obj.get(key, _MISSING)
    at = f"{where}: {key!r}" if where else repr(key)
    if value is _MISSING or (value is None and optional and type(None) not in _as_tuple(types)):
        if optional:
            return default
        raise BadInput(at, "missing")
    check_type(value, types, at)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if minimum is not None and value < minimum:
            raise BadInput(at, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise BadInput(at, f"must be <= {maximum}, got {value}")
    if nonempty and isinstance(value, (str, list, dict)) and not (value.strip() if isinstance(value, str) else value):
        raise BadInput(at, "must not be empty")
    if choices is not None and value not in choices:
        raise BadInput(at, f"must be one of {', '.join(map(repr, choices))}, got {_short(value)}")
    if check is not None:
        problem = check(value)
        if problem:
            raise BadInput(at, problem)
    return value


def list_of(value: Any, types, where: str, *, minimum: float | None = None) -> list:
    """A list whose every item is one of `types` (and >= minimum for numbers)."""
    check_type(value, list, where)
    for i, v in enumerate(value):
        check_type(v, types, f"{where}[{i}]")
        if minimum is not None and isinstance(v, (int, float)) and v < minimum:
            raise BadInput(f"{where}[{i}]", f"must be >= {minimum}, got {v}")
    return value


def regular_file(path, what: str = "file") -> Path:
    """`path` as a Path if it is a regular file (following symlinks); a FIFO, socket, device or folder would
    block or mislead a reader, so it is refused by name."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise BadInput(str(p), f"{what} not found") from None
    except OSError as e:
        raise BadInput(str(p), f"{what} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        )
        raise BadInput(str(p), f"{what} is {kind}; expected a regular file")
    return p


class NotWritable(BadInput):
    """A folder this user cannot make or write into (a fact about this machine and user, not about the path)."""


def writable_dir(path, what: str = "folder", make: bool = False) -> Path:
    """`path` (~ expanded, made absolute) as a folder this process can write into. make: create it and its
    parents (mkdir -p); else a missing folder passes when it could be made. Something that is not a folder, on
    the way or at the end, is refused by name (BadInput); a folder that cannot be made or written: NotWritable."""
    text = os.fspath(path)
    if not text.strip() or "\x00" in text:
        raise BadInput(repr(text), f"{what} must be a folder name (not empty, no NUL)")
    p = Path(os.path.abspath(os.path.expanduser(text)))
    probe = p
    while not os.path.lexists(probe) and probe.parent != probe:
        probe = probe.parent  # the nearest part of the path that exists
    if not os.path.isdir(probe):
        kind = (
            "a broken symlink"
            if os.path.islink(probe) and not os.path.exists(probe)
            else "a file"
            if os.path.isfile(probe)
            else "not a folder"
        )
        at = f"{what} is {kind}" if probe == p else f"{what} lies under {probe}, which is {kind}"
        raise BadInput(str(p), f"{at}; expected a folder")
    if make and probe != p:
        try:
            os.makedirs(p, exist_ok=True)
        except OSError as e:
            raise NotWritable(str(p), f"{what} cannot be made ({e.strerror or e})") from None
        probe = p
    if not os.access(probe, os.W_OK | os.X_OK):
        raise NotWritable(
            str(p),
            f"{what} is not writable by this user"
            if probe == p
            else f"{what} cannot be made: {probe} is not writable by this user",
        )
    return p


def read_text_file(path, what: str = "file", max_bytes: int | None = None) -> str:
    p = regular_file(path, what)
    try:
        with open(p, "rb") as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except OSError as e:
        raise BadInput(str(p), f"{what} cannot be read ({e.strerror or e})") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise BadInput(str(p), f"{what} is larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(str(p), f"{what} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def parse_json(text: str | bytes, where: str, what: str = "JSON", expect=dict) -> Any:
    """Parse JSON text; the top-level value must be `expect` (dict by default; None: anything). Non-finite
    numbers (NaN, Infinity) are refused: no input of ours legitimately holds them."""

    def _no_const(name):
        raise ValueError(f"{name} is not allowed")

    try:
        value = json.loads(text, parse_constant=_no_const)
    except (ValueError, RecursionError) as e:
        raise BadInput(where, f"{what} is not valid JSON ({str(e)[:200]})") from None
    if expect is not None:
        check_type(value, expect, f"{where} ({what})" if where else what)
    return value


def read_json_file(path, what: str = "JSON file", expect=dict, max_bytes: int | None = 1 << 28) -> Any:
    """A regular file holding JSON whose top level is `expect` (an object by default)."""
    p = Path(path)
    return parse_json(read_text_file(p, what, max_bytes), str(p), what, expect)


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def at_least(kind, minimum: float, what: str | None = None):
    """An argparse `type`: a finite `kind` (int or float) >= minimum, else ArgumentTypeError (argparse names the
    flag). A count of 0 or -1 must not silently mean "all", nor a NaN timeout start anything."""
    import argparse

    what = what or f"{kind.__name__} >= {minimum:g}"

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or v < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    parse.__name__ = what
    return parse
