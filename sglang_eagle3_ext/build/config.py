"""`build --config FILE`: a YAML mapping of flags (`lr: 3e-3`, `max-new-tokens: 96`; `-` or `_` alike), read
and checked at the boundary: an unknown key is refused naming it (with `did you mean`), a value is checked by
the same rule as its flag, `null` is the flag's default. The command line overrides it."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..boundary import BadInput, read_text_file

BOOL = "bool"  # the rule of a flag that takes no value
MAX_BYTES = 1 << 20


def key_of(name: str) -> str:
    return str(name).strip().lstrip("-").replace("-", "_")


def flag_of(key: str) -> str:
    return "--" + key.replace("_", "-")


def read_config(path: str | Path, rules: dict[str, object]) -> dict:
    """{dest: value} from the YAML file `path`. `rules`: dest -> BOOL, None (text as given) or a converter
    raising on a bad value (an argparse `type`)."""
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
            near = difflib.get_close_matches(flag_of(key), [flag_of(k) for k in rules], n=1)
            hint = f"; did you mean {near[0].lstrip('-')!r}?" if near else ""
            raise BadInput(where, f"unknown key {name!r}{hint} (keys are build's and train's flags without --)")
        if value is not None:  # null: the flag's default
            out[key] = _value(where, name, value, rules[key])
    return out


def _value(where: str, name, value, rule):
    if rule == BOOL:
        if not isinstance(value, bool):
            raise BadInput(where, f"{name}: expected true or false, got {value!r}")
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        value = ",".join(map(str, value))  # layer ids as a YAML list
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadInput(where, f"{name}: expected a number or text, got {value!r}")
    if rule is None:
        return str(value)
    try:
        return rule(str(value))
    except Exception as e:  # noqa: BLE001 - argparse types raise ArgumentTypeError/ValueError: said as one line
        raise BadInput(where, f"{name}: {e}") from None


def dump_config(values: dict) -> str:
    """The resolved configuration as YAML that --config reads back."""
    import yaml

    return yaml.safe_dump({k.replace("_", "-"): v for k, v in values.items()}, sort_keys=False)
