"""Server presets: YAML files of SGLang `ServerArgs` fields plus our own `eagle3_ext:` section.

    model_path: builtin:tiny-deepseek-v3     # any ServerArgs field (underscores or dashes)
    disable_radix_cache: true
    eagle3_ext:                              # ours: become SGLANG_EAGLE3_EXT_* variables
      dump_dir: ./dumps
      dump_layers: [1, 2, 3]                 # HF hidden_states indices (0 = embeddings)

The flat part is also what SGLang's own `--config` reads, so SGLang config files work as presets.
Keys are checked against the installed SGLang's ServerArgs (unknown -> error with the nearest
name), each value against that field's own flag (type, list or not, choices) and our section's values
against envs.py; a key given twice is refused (preset_schema.py). Values become command-line arguments
through SGLang's own parser, so the command line (which comes after) overrides them.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
from pathlib import Path

from .. import envs
from ..boundary import BadInput, read_text_file
from . import preset_files
from .preset_files import available_presets, find_preset, names_a_file, preset_dirs  # noqa: F401 (their old home)
from .preset_schema import (
    EXT_KEYS,
    EXT_SECTION,
    PresetError,
    as_text,
    check_keys,
    check_server_value,
    check_shape,
    ext_text,
    unique_key_loader,
)
from .server_args import installed_field_names

preset = preset_files.preset  # the argparse type of --preset, also under its old name here
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("tiny-deepseek-v3", "tiny-kimi-k25")  # made by tiny/builtin.ensure_builtin
MAX_PRESET_BYTES = 1 << 20


@dataclasses.dataclass
class Preset:
    name: str
    path: Path
    server_args: dict  # ServerArgs field -> value
    ext: dict  # our eagle3_ext section
    by_name: bool = True  # given as --preset NAME (else a file: --config FILE, or --preset FILE)
    flag: str = "--config"  # the flag that named the file

    @property
    def where(self) -> str:
        """How the user named it, for messages."""
        return f"--preset {self.name} ({self.path})" if self.by_name else f"{self.flag} {self.path}"


def load(name: str | None = None, path: str | os.PathLike | None = None) -> Preset:
    """Read and check a preset file: structure, keys, value shapes, our section's values (ServerArgs values
    are checked against SGLang's parser by `check_values`)."""
    flag = "--config"
    if name and not path and names_a_file(name):
        path, flag = name, "--preset"
        if not Path(path).is_file():
            raise PresetError(
                f"--preset {path}: no such file (a preset file, or one of: {', '.join(available_presets())})"
            )
    p = Path(path) if path else find_preset(name)
    where = f"--preset {name} ({p})" if not path else f"{flag} {p}"
    data = _read_yaml(p, where)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PresetError(f"{where}: top level must be a mapping of ServerArgs fields")
    check_keys(data, where)
    ext = data.pop(EXT_SECTION, None)
    ext = {} if ext is None else ext
    if not isinstance(ext, dict):
        raise PresetError(f"{where}: `{EXT_SECTION}:` must be a mapping, got {type(ext).__name__} {ext!r:.40}")
    check_keys(ext, f"{where}: {EXT_SECTION}")
    args: dict = {}
    for key, value in data.items():
        dest = key.replace("-", "_")
        if dest in args:
            raise PresetError(f"{where}: {key!r} and {dest!r} name the same field; keep one")
        args[dest] = check_shape(value, f"{where}: key {key!r}")
    for key, value in ext.items():
        if key in EXT_KEYS and value is not None:  # unknown keys: validate() names the nearest one
            ext_text(key, value, f"{where}: {EXT_SECTION}.{key}")
    return Preset(name=p.stem if path else name, path=p, server_args=args, ext=dict(ext), by_name=not path, flag=flag)


def _read_yaml(p: Path, where: str):
    import yaml

    try:
        text = read_text_file(p, "config file", max_bytes=MAX_PRESET_BYTES)
    except BadInput as e:
        raise PresetError(f"{where}: cannot be read ({e.problem})") from None
    try:
        return yaml.load(text, Loader=unique_key_loader())
    except yaml.YAMLError as e:  # one line: where, and yaml's own reason
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PresetError(f"{where}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as e:  # a tag's constructor (e.g. `!!int x`)
        raise PresetError(f"{where}: not valid YAML: {type(e).__name__}: {e}") from None


def _unknown(kind: str, key: str, valid, where: str) -> PresetError:
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return PresetError(f"{where}: unknown {kind} {key!r}{hint}")


def validate(preset: Preset, field_names, sglang_version: str = "?") -> None:
    """Every key must be a ServerArgs field of the installed SGLang (and our section keys ours)."""
    where = preset.where
    fields = set(field_names)
    for key in preset.server_args:
        if key not in fields:
            raise _unknown(f"key (not a ServerArgs field of sglang {sglang_version})", key, fields, where)
    for key in preset.ext:
        if key not in EXT_KEYS:
            raise _unknown(f"`{EXT_SECTION}:` key", key, EXT_KEYS, where)


def check_values(preset: Preset, parser: argparse.ArgumentParser) -> None:
    """Every ServerArgs value is what SGLang's own flag accepts (type, list or not, choices), named by file and key."""
    where = preset.where
    for dest, value in preset.server_args.items():
        a = _action_for(parser, dest)
        if value is None or a is None:  # no flag: to_cli_args says so
            continue
        flag = "--" + dest.replace("_", "-")
        check_server_value(
            a, value, f"{where}: key {dest!r}", flag if flag in a.option_strings else a.option_strings[0]
        )


def server_args_fields():
    """(field names, version) of the installed SGLang's ServerArgs; ImportError without SGLang."""
    from ..versions import installed_version

    return installed_field_names(), installed_version() or "?"


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang's own argument parser (exactly what prepare_server_args builds)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _action_for(parser: argparse.ArgumentParser, dest: str) -> argparse.Action | None:
    flag = "--" + dest.replace("_", "-")
    cands = [a for a in parser._actions if a.dest == dest and a.option_strings]
    for a in cands:  # prefer the canonical spelling over deprecated aliases
        if flag in a.option_strings:
            return a
    if cands:
        return cands[0]
    # a flag whose dest is not the field's name (0.5.10: --tp-size -> tensor_parallel_size, mapped back by SGLang)
    return parser._option_string_actions.get(flag)


def has_flag(parser: argparse.ArgumentParser, dest: str) -> bool:
    return _action_for(parser, dest) is not None


def to_cli_args(server_args: dict, parser: argparse.ArgumentParser | None, where: str = "preset") -> list[str]:
    """ServerArgs values -> command-line tokens SGLang's parser accepts.

    Without a parser (SGLang not installed; dry-run only) bools become bare flags."""
    out: list[str] = []
    for dest, value in server_args.items():
        a = _action_for(parser, dest) if parser else None
        flag = "--" + dest.replace("_", "-")
        if a is not None and flag not in a.option_strings:
            flag = a.option_strings[0]
        if parser is not None and a is None:
            raise PresetError(f"{where}: ServerArgs field {dest!r} has no command-line flag in this SGLang")
        if value is None:
            continue
        if a is not None and isinstance(a, argparse.BooleanOptionalAction):
            out.append(flag if value else "--no-" + flag[2:])
        elif a is not None and a.nargs == 0:  # store_true-like: only True means something
            if not isinstance(value, bool):
                raise PresetError(f"{where}: {dest} is a switch; use true/false, not {value!r}")
            if value:
                out.append(flag)
        elif a is None and isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *(_str(v) for v in value)]
        else:
            out += [flag, _str(value)]
    return out


_str = as_text


def quiet_parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args without SGLang's per-parse chatter (deprecation notes); errors still shown, then exit 2."""
    import contextlib
    import io

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            ns = parser.parse_args(argv)
    except SystemExit:
        sys.stderr.write(buf.getvalue())
        raise
    return _with_field_names(parser, ns)


def _with_field_names(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.Namespace:
    """Each value also under its flag's field name where the parser stores it elsewhere (0.5.10: `--tp-size` ->
    tensor_parallel_size, which SGLang maps back to tp_size), so settings are read by field name on every release."""

    fields = set(installed_field_names())
    for a in parser._actions:
        if not hasattr(ns, a.dest) or a.dest in fields:
            continue
        for opt in a.option_strings:
            name = opt[2:].replace("-", "_")
            if opt.startswith("--") and name in fields and not hasattr(ns, name):
                setattr(ns, name, getattr(ns, a.dest))
    return ns


def user_dests(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """ServerArgs dests set explicitly in `argv` (abbreviations and --x=v handled by SGLang's parser).

    Exits through argparse with SGLang's own message on an unknown argument."""
    saved = [(a, a.default, a.required) for a in parser._actions]
    try:
        for a in parser._actions:
            a.default, a.required = argparse.SUPPRESS, False
        return set(vars(quiet_parse(parser, argv)))
    finally:
        for a, default, required in saved:
            a.default, a.required = default, required


def ext_env(ext: dict, base_dir: Path | None = None) -> dict[str, str]:
    """Our section -> SGLANG_EAGLE3_EXT_* values (dump_dir made absolute: children may chdir)."""
    env = {}
    for key, var in EXT_KEYS.items():
        if not var or ext.get(key) is None:
            continue
        v = ext_text(key, ext[key], f"{EXT_SECTION}.{key}")
        if var == envs.DUMP_DIR:
            v = str((Path(base_dir or Path.cwd()) / os.path.expanduser(v)).resolve())
        env[var] = v
    return env


def builtin_model_name(model_path: str | None) -> str | None:
    if model_path and model_path.startswith(BUILTIN_PREFIX):
        name = model_path[len(BUILTIN_PREFIX) :]
        if name not in BUILTIN_MODELS:
            raise PresetError(
                f"unknown built-in model {model_path!r} (known: "
                f"{', '.join(BUILTIN_PREFIX + m for m in BUILTIN_MODELS)})"
            )
        return name
    return None
