"""`build --config FILE`: a YAML mapping of flags (`lr: 3e-3`, `max-new-tokens: 96`; `-` or `_` alike), read
and checked at the boundary: an unknown key is refused naming it (with `did you mean`), a value is checked by
the flag's own declaration (`options.schema.flag`: its type, a boolean for a flag that takes no value, its
choices), `null` is the flag's default. The command line overrides it."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..boundary import BadInput, read_text_file
from ..options.schema import Flag, flag_fields, flag_of
from ..training.options import FLAG_TYPES as TRAIN_FLAG_TYPES
from .options import TRAIN_SET_BY_BUILD, BuildOptions

MAX_BYTES = 1 << 20
# the command's output flags (cli's own, no field of an options type): they take no value
_OUTPUT = dict.fromkeys(("quiet", "verbose"), Flag(help="a flag that takes no value", action="store_true"))
_NO_VALUE = ("store_true", "store_false")


def rules_of(options_type, skip=()) -> dict[str, Flag]:
    """dest -> the flag declaration of each flag field of `options_type` (in declaration order)."""
    return {f.name: flag_of(f) for f in flag_fields(options_type) if f.name not in skip}


def config_rules() -> dict[str, Flag]:
    """The keys `build --config` takes, each with its flag's declaration, in the order of `build --help`: build's
    flags, its output flags, and train's but those build sets itself."""
    train = {k: v for t in TRAIN_FLAG_TYPES for k, v in rules_of(t, skip=TRAIN_SET_BY_BUILD).items()}
    return {**rules_of(BuildOptions), **_OUTPUT, **train}


def key_of(name: str) -> str:
    return str(name).strip().lstrip("-").replace("-", "_")


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def read_config(path: str | Path, rules: dict[str, Flag]) -> dict:
    """{dest: value} from the YAML file `path`. `rules`: dest -> its flag's declaration (`config_rules()`): its
    argparse `type` converts the text (none: the text as given), a flag that takes no value takes a boolean,
    `choices` bound the value."""
    import yaml

    where = f"--config {path}"
    try:  # its kind first: a FIFO or device would block or never end
        text = read_text_file(path, "YAML file of build's and train's flags", max_bytes=MAX_BYTES)
    except BadInput as e:
        raise BadInput(where, e.problem) from None
    try:
        raw = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as e:
        raise BadInput(where, f"not YAML ({type(e).__name__}: {(str(e).splitlines() or [''])[0]})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadInput(where, f"expected a mapping of flags (lr: 0.003), got {type(raw).__name__}")
    out = {}
    for name, value in raw.items():
        key = key_of(name)
        if key not in rules:
            near = difflib.get_close_matches(_flag(key), [_flag(k) for k in rules], n=1)
            hint = f"; did you mean {near[0].lstrip('-')!r}?" if near else ""
            raise BadInput(where, f"unknown key {name!r}{hint} (keys are build's and train's flags without --)")
        if value is not None:  # null: the flag's default
            out[key] = _value(where, name, value, rules[key])
    for key, rule in rules.items():  # once every key and value is read
        if key in out and rule.choices is not None and out[key] not in rule.choices:
            raise BadInput(
                where, f"{key.replace('_', '-')}: {out[key]!r} is not one of {', '.join(map(str, rule.choices))}"
            )
    return out


def _value(where: str, name, value, rule: Flag):
    if rule.action in _NO_VALUE:
        if not isinstance(value, bool):
            raise BadInput(where, f"{name}: expected true or false, got {value!r}")
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        value = ",".join(map(str, value))  # layer ids as a YAML list
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadInput(where, f"{name}: expected a number or text, got {value!r}")
    if rule.type is None:
        return str(value)
    try:
        return rule.type(str(value))
    except Exception as e:  # noqa: BLE001 - argparse types raise ArgumentTypeError/ValueError: said as one line
        said = str(e).replace("\r", "\\r").replace("\n", "\\n")  # a value's line break would split the one line
        raise BadInput(where, f"{name}: {said}") from None


def dump_config(values: dict) -> str:
    """The resolved configuration as YAML that --config reads back."""
    import yaml

    return yaml.safe_dump({k.replace("_", "-"): v for k, v in values.items()}, sort_keys=False)
