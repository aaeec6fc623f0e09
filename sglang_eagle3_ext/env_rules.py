"""The parse rules of the environment registry (envs.py): a variable's declaration (`Var`) and one rule per type,
the same in every module; an illegal value is an `EnvError` naming the variable and its legal values. Reads no
environment itself."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


class EnvError(ValueError):
    """A variable set to a value outside its legal ones; the message names both."""

    def __init__(self, name: str, value: str, legal: str, message: str | None = None):
        self.name, self.value, self.legal = name, value, legal
        super().__init__(message or f"{name}={value!r}: expected {legal}")


@dataclasses.dataclass(frozen=True)
class Var:
    name: str
    type: str  # bool | int | float | choice | path | str | layers
    default: Any  # parsed value when unset (None: no default); callable: computed
    doc: str
    section: str = "general"  # README table it belongs to: general | dump
    preset_key: str | None = None  # key in a preset's `eagle3_ext:` section (launch/presets.py)
    choices: tuple[str, ...] = ()
    minimum: float | None = None  # int / float: inclusive bounds
    maximum: float | None = None
    default_doc: str | None = None  # how the README shows the default, when not the value itself

    @property
    def legal(self) -> str:
        if self.type == "bool":
            return "1/true/yes/on or 0/false/no/off"
        if self.type in ("int", "float"):
            lo = f" >= {self.minimum}" if self.minimum is not None else ""
            hi = f" <= {self.maximum}" if self.maximum is not None else ""
            return ("an integer" if self.type == "int" else "a number") + lo + (" and" if lo and hi else "") + hi
        if self.type == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.type == "layers":
            return LAYERS_LEGAL
        return "a non-empty value"

    def parse(self, text: str) -> Any:
        """The typed value of `text` (as set in the environment); EnvError when it is not legal."""
        s = text.strip()
        if self.type == "bool":
            return parse_bool(self.name, text)
        if s == "":
            return self.default_value()
        if self.type == "int":
            if not re.fullmatch(r"[+-]?[0-9]+", s):
                raise EnvError(self.name, text, self.legal)
            n = int(s)
            if self.minimum is not None and n < self.minimum:
                raise EnvError(self.name, text, self.legal)
            return n
        if self.type == "float":
            try:
                v = float(s)
            except ValueError:
                raise EnvError(self.name, text, self.legal) from None
            if not (
                math.isfinite(v)
                and (self.minimum is None or v >= self.minimum)
                and (self.maximum is None or v <= self.maximum)
            ):
                raise EnvError(self.name, text, self.legal)
            return v
        if self.type == "choice":
            if s.lower() not in self.choices:
                raise EnvError(self.name, text, self.legal)
            return s.lower()
        if self.type == "layers":
            return parse_layers(s, self.name)
        return s

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default


def parse_bool(name: str, text: str) -> bool:
    """The one boolean rule of the package."""
    s = (text or "").strip().lower()
    if s in TRUE:
        return True
    if s in FALSE:
        return False
    raise EnvError(name, text, "1/true/yes/on or 0/false/no/off")


LAYERS_LEGAL = "comma-separated integers, e.g. 2,30,58, or LAYOUT:N, e.g. dflash:5"
_LAYER_TOKEN = re.compile(r"[0-9]+", re.ASCII)  # int() also takes "1_0", "١" and whitespace: not layer ids
_DRAFT_FORM = re.compile(r"([a-z][a-z0-9_-]*):([1-9][0-9]*)", re.ASCII)


@dataclasses.dataclass(frozen=True)
class DraftLayers:
    """`LAYOUT:N`: the aux layers a fresh draft of that layout with N decoder layers reads when none are named,
    resolved where the target's layer count is known (the layout's name is checked there)."""

    layout: str
    num_layers: int

    def __str__(self) -> str:
        return f"{self.layout}:{self.num_layers}"


def parse_layers(text: str, name: str) -> tuple[int, ...] | DraftLayers | None:
    """ "2,30,58" -> (2, 30, 58); "dflash:5" -> DraftLayers("dflash", 5); None when empty. Only ASCII digits
    between single commas (spaces around them allowed): "1,,2", "1_0", "1.9", "-1" and non-ASCII digits are an
    EnvError naming `name`, never a guess."""
    text = (text or "").strip()
    if not text:
        return None
    m = _DRAFT_FORM.fullmatch(text)
    if m:
        return DraftLayers(m[1], int(m[2]))
    parts = [x.strip() for x in text.split(",")]
    bad = [x for x in parts if not _LAYER_TOKEN.fullmatch(x)]
    if bad:
        raise EnvError(
            name,
            text,
            LAYERS_LEGAL,
            f"{name}={text!r}: {bad[0]!r} is not a layer index; expected "
            f"comma-separated non-negative integers (ASCII digits), e.g. 2,30,58, or LAYOUT:N (a draft layout and "
            f"its layer count, e.g. dflash:5)",
        )
    return tuple(int(x) for x in parts)
