"""What a preset file must hold: YAML without duplicate keys, string keys, values of the shape their key needs
(checked against SGLang's own argument parser for ServerArgs fields; in our section, against envs.py, and the
launcher's own settings against their flags in LaunchOptions).

Every refusal is a PresetError naming the file and the key; nothing later sees an unchecked value.
"""

from __future__ import annotations

import argparse
import functools
import math
from datetime import date, datetime

from .. import envs
from ..options.schema import flag_fields, flag_of
from .options import PRESET_KEYS, LaunchOptions
from .preset_files import PresetError

EXT_SECTION = "eagle3_ext"
# eagle3_ext key -> env var ("" = consumed by the launcher itself); declared once, in envs.py
EXT_KEYS = {**envs.preset_keys(), **dict.fromkeys(PRESET_KEYS, ""), "eager_prefill": ""}
_SCALARS = (bool, int, float, str)


@functools.lru_cache(maxsize=None)
def unique_key_loader():
    """yaml.SafeLoader that refuses a key given twice in one mapping (safe_load silently keeps the last)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges may be overridden, by design
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: SafeLoader's own error says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def _text_problem(s: str) -> str | None:
    if not s.strip():
        return "must not be empty (remove the key for the default)"
    if "\x00" in s:
        return "holds a NUL character"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid text"
    return None


def check_shape(value, at: str, nested: bool = False):
    """A YAML value a preset key may hold: null, true/false, a finite number, non-empty text, a non-empty list of
    those, or (for JSON arguments) a mapping of them. Dates, binary and the like are refused."""
    if value is None or isinstance(value, bool) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PresetError(f"{at}: expected a finite number, got {value}")
        return value
    if isinstance(value, str):
        problem = _text_problem(value)
        if problem:
            raise PresetError(f"{at}: {problem}")
        return value
    if isinstance(value, list) and not nested:
        if not value:
            raise PresetError(f"{at}: empty list (remove the key for the default)")
        for i, item in enumerate(value):
            if not isinstance(item, _SCALARS):
                raise PresetError(f"{at}[{i}]: expected a string, number or true/false, got {type(item).__name__}")
            check_shape(item, f"{at}[{i}]", nested=True)
        return value
    if isinstance(value, dict):  # a JSON argument (json_model_override_args): must be JSON
        if not all(isinstance(k, str) for k in value):
            raise PresetError(f"{at}: mapping keys must be strings")
        _json_ok(value, at)
        return value
    kind = "a date" if isinstance(value, (date, datetime)) else type(value).__name__
    raise PresetError(f"{at}: expected a string, number, true/false or a list of them, got {kind} {value!r:.60}")


def _json_ok(v, at: str) -> None:
    import json

    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise PresetError(f"{at}: not expressible as JSON ({e})") from None


def check_keys(mapping: dict, at: str) -> None:
    for k in mapping:
        if not isinstance(k, str) or not k:
            raise PresetError(f"{at}: key {k!r} is not a name (keys are ServerArgs fields or {EXT_SECTION}: keys)")


def ext_text(key: str, value, at: str) -> str:
    """Our section's value -> the text its variable takes, by the variable's own rule (envs.py)."""
    if key in PRESET_KEYS:
        return launcher_text(key, value, at)
    if key == "eager_prefill":
        if not isinstance(value, bool):
            raise PresetError(f"{at}: expected true or false, got {value!r}")
        return "1" if value else "0"
    var = envs.VARS[EXT_KEYS[key]]
    if var.type == "layers":
        from ..dump.config import DumpConfigError, layers_text

        try:  # integers only: [1.9, 2.9] must not become 1,2
            return layers_text(value, at)
        except DumpConfigError as e:
            raise PresetError(str(e)) from None
    want = {"bool": bool, "int": int, "float": float}.get(var.type, str)
    ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
    if not ok and want is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise PresetError(f"{at}: expected {var.legal}, got {value!r:.60}")
    text = ("1" if value else "0") if want is bool else str(value)
    problem = _text_problem(text)
    if problem:
        raise PresetError(f"{at}: {problem}")
    try:
        var.parse(text)
    except ValueError:
        raise PresetError(f"{at}: expected {var.legal}, got {value!r:.60}") from None
    return text


def launcher_text(key: str, value, at: str) -> str:
    """A launcher setting of our section (a LaunchOptions field) checked as its flag checks the command line's:
    a switch takes true/false, any other a scalar its type converts and that is one of its choices."""
    f = flag_of(next(x for x in flag_fields(LaunchOptions) if x.name == key))
    if f.action in ("store_true", "store_false"):
        if not isinstance(value, bool):
            raise PresetError(f"{at}: expected true or false, got {value!r}")
        return "1" if value else "0"
    ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    if ok and f.type is not None:
        try:
            f.type(str(value))
        except argparse.ArgumentTypeError as e:
            raise PresetError(f"{at}: {e}") from None
    if not ok or (f.choices is not None and value not in f.choices):
        want = f"one of {', '.join(f.choices)}" if f.choices is not None else "a single value"
        raise PresetError(f"{at}: expected {want}, got {value!r}")
    return str(value)


# ------------------------------------------------------------------ ServerArgs values vs SGLang's parser


def _takes_list(a: argparse.Action) -> bool:
    return a.nargs in ("+", "*") or (isinstance(a.nargs, int) and a.nargs > 1)


def check_server_value(a: argparse.Action, value, at: str, flag: str) -> None:
    """`value` must be what SGLang's argument `a` accepts: a switch takes true/false, a one-value flag no list,
    every item converts with the flag's own type and is one of its choices."""
    if a.nargs == 0 or isinstance(a, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise PresetError(f"{at}: {flag} is a switch; use true or false, not {value!r:.60}")
        return
    if isinstance(value, list) and not _takes_list(a):
        raise PresetError(f"{at}: {flag} takes one value, not a list")
    if isinstance(a.nargs, int) and a.nargs > 1 and len(value if isinstance(value, list) else [value]) != a.nargs:
        raise PresetError(f"{at}: {flag} takes exactly {a.nargs} values")
    if isinstance(value, dict) and a.type not in (None, str):
        raise PresetError(f"{at}: {flag} takes {_type_name(a.type)}, not a mapping")
    for item in value if isinstance(value, list) else [value]:
        text = as_text(item)
        conv = text
        if callable(a.type):
            try:
                conv = a.type(text)
            except Exception:  # noqa: BLE001 - SGLang's own converters raise what they like; any failure = refusal
                raise PresetError(f"{at}: {flag} takes {_type_name(a.type)}, got {item!r:.60}") from None
        if a.choices is not None and conv not in a.choices:
            raise PresetError(f"{at}: {flag} takes one of {', '.join(map(str, a.choices))}; got {item!r:.60}")


def _type_name(t) -> str:
    return {int: "an integer", float: "a number", str: "text"}.get(t, f"a value {getattr(t, '__name__', t)} accepts")


def as_text(v) -> str:
    """A preset value as the command-line text SGLang's parser reads."""
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)
