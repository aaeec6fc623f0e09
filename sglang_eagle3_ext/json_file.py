"""The JSON files the package writes (a command's `--json PATH` report, a build's stage markers and report):
NaN/Infinity written as null (JSON has neither), a file replaced whole (a temporary file beside it, synced, then
renamed into place: a reader never sees half of one), '-' printed on stdout instead; and `--json PATH` checked
before a command acts. Imports nothing heavy."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from .boundary import BadInput
from .options.values import json_dest


def finite(obj):
    """`obj` with its NaN/Infinity (an accuracy that measured nothing) as None, in dicts, lists and tuples too."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """`text` into the file `path` (its folder made), whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(dest: str | os.PathLike, obj) -> None:
    """`obj` as indented JSON (non-finite numbers null, other values by their str): printed on stdout when `dest`
    is '-', else written to the file `dest` with write_atomic."""
    text = json.dumps(finite(obj), indent=2, default=str, allow_nan=False)
    if dest == "-":
        print(text)
        return
    write_atomic(dest, text + "\n")


def check_json_dest(dest: str | None, made: bool = True) -> None:
    """`--json PATH` checked before a command acts (a report that cannot be written must not be found only after
    the irreversible step): PATH is no folder, and its folder is writable here or can be made (made=False: is
    there already)."""
    if not dest or dest == "-":
        return
    p = os.path.abspath(os.path.expanduser(dest))
    if os.path.isdir(p):
        raise BadInput(f"--json {dest}", "is a folder; give a file path")
    parent = os.path.dirname(dest) or "."
    if not made and not os.path.isdir(parent):
        raise BadInput(f"--json {dest}", f"no folder {parent}; create it or give another path")
    try:
        json_dest(dest)  # its folder exists and is writable, or can be made (write_json makes it)
    except argparse.ArgumentTypeError as e:
        raise BadInput(
            f"--json {dest}", str(e).split("; ")[0].removeprefix(f"{dest}: ") + "; give another path"
        ) from None
