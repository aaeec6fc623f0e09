"""SGLang's `ServerArgs` read the same way whatever it is built with: a dataclass (0.5.10 .. 0.5.22) or a
msgspec struct (0.5.23). The class is inspected, not the version, so a patched or backported build works too."""

from __future__ import annotations

import dataclasses


def field_names(cls) -> list[str]:
    """The field names of a `ServerArgs` class, in declaration order."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    struct_fields = getattr(cls, "__struct_fields__", None)  # msgspec.Struct (msgspec.structs.fields reads it)
    if isinstance(struct_fields, tuple) and all(isinstance(n, str) for n in struct_fields):
        return list(struct_fields)
    raise TypeError(
        f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s} is neither a dataclass "
        f"nor a msgspec struct: this SGLang build declares its server arguments in a way this package "
        f"does not read; run `sglang-eagle3 compat` and report it"
    )


def installed_field_names() -> list[str]:
    """The installed SGLang's ServerArgs fields; ImportError without SGLang."""
    from sglang.srt.server_args import ServerArgs

    return field_names(ServerArgs)


def field_defaults(cls) -> dict:
    """Field name -> its plain default (fields without one, or with a factory, are left out)."""
    if dataclasses.is_dataclass(cls):
        return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    names = field_names(cls)
    defaults = getattr(cls, "__struct_defaults__", ())  # msgspec: the defaults of the trailing fields
    pairs = zip(names[len(names) - len(defaults) :], defaults)
    return {n: d for n, d in pairs if type(d).__name__ not in ("Factory", "NoDefault")}


def installed_field_defaults() -> dict:
    from sglang.srt.server_args import ServerArgs

    return field_defaults(ServerArgs)
