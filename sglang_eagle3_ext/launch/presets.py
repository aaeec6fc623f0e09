"""Server presets: YAML files of SGLang `ServerArgs` fields plus our own `eagle3_ext:` section.

    model_path: builtin:tiny-deepseek-v3     # any ServerArgs field (underscores or dashes)
    disable_radix_cache: true
    eagle3_ext:                              # ours: become SGLANG_EAGLE3_EXT_* variables
      dump_dir: ./dumps
      dump_layers: [1, 2, 3]                 # HF hidden_states indices (0 = embeddings)

The flat part is also what SGLang's own `--config` reads, so SGLang config files work as presets.
Keys are checked against the installed SGLang's ServerArgs (unknown -> error with the nearest
name); values become command-line arguments through SGLang's own parser, so the command line
(which comes after) overrides them.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
from pathlib import Path

from .. import envs

ENV_DUMP_DIR = envs.DUMP_DIR
EXT_SECTION = "eagle3_ext"
# eagle3_ext key -> env var ("" = consumed by the launcher itself); declared once, in envs.py
EXT_KEYS = {**envs.preset_keys(), "nccl_profile": ""}
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("tiny-deepseek-v3", "tiny-kimi-k25")   # made by tiny.ensure_builtin


class PresetError(ValueError):
    pass


@dataclasses.dataclass
class Preset:
    name: str
    path: Path
    server_args: dict       # ServerArgs field -> value
    ext: dict               # our eagle3_ext section


def preset_dirs() -> list[Path]:
    """Installed wheel: sglang_eagle3_ext/server_configs (hatch force-include); checkout: <repo>/server_configs."""
    pkg = Path(__file__).resolve().parent.parent
    return [d for d in (pkg / "server_configs", pkg.parent / "server_configs") if d.is_dir()]


def available_presets() -> list[str]:
    return sorted({p.stem for d in preset_dirs() for p in d.glob("*.yaml")})


def find_preset(name: str) -> Path:
    for d in preset_dirs():
        p = d / f"{name}.yaml"
        if p.is_file():
            return p
    names = available_presets()
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise PresetError(f"no preset {name!r}{hint} (available: {', '.join(names) or 'none'}; "
                      f"looked in {', '.join(map(str, preset_dirs())) or 'no server_configs folder'})")


def load(name: str | None = None, path: str | os.PathLike | None = None) -> Preset:
    import yaml

    p = Path(path) if path else find_preset(name)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError:
        raise PresetError(f"config file {p} not found") from None
    except yaml.YAMLError as e:   # one line: where, and yaml's own reason
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PresetError(f"config file {p}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PresetError(f"config file {p}: cannot be read ({e.strerror if isinstance(e, OSError) else e})") from None
    if not isinstance(data, dict):
        raise PresetError(f"config file {p}: top level must be a mapping of ServerArgs fields")
    ext = data.pop(EXT_SECTION, None) or {}
    if not isinstance(ext, dict):
        raise PresetError(f"config file {p}: `{EXT_SECTION}:` must be a mapping")
    args = {str(k).replace("-", "_"): v for k, v in data.items()}
    return Preset(name=name or p.stem, path=p, server_args=args, ext=dict(ext))


def _unknown(kind: str, key: str, valid, where: str) -> PresetError:
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return PresetError(f"{where}: unknown {kind} {key!r}{hint}")


def validate(preset: Preset, field_names, sglang_version: str = "?") -> None:
    """Every key must be a ServerArgs field of the installed SGLang (and our section keys ours)."""
    where = f"preset {preset.name} ({preset.path})"
    fields = set(field_names)
    for key in preset.server_args:
        if key not in fields:
            raise _unknown(f"key (not a ServerArgs field of sglang {sglang_version})", key, fields, where)
    for key in preset.ext:
        if key not in EXT_KEYS:
            raise _unknown(f"`{EXT_SECTION}:` key", key, EXT_KEYS, where)


def server_args_fields():
    """(field names, version) of the installed SGLang's ServerArgs; ImportError without SGLang."""
    from sglang.srt.server_args import ServerArgs

    from ..versions import installed_version

    return [f.name for f in dataclasses.fields(ServerArgs)], installed_version() or "?"


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
    return cands[0] if cands else None


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


def _str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def quiet_parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args without SGLang's per-parse chatter (deprecation notes); errors still shown, then exit 2."""
    import contextlib
    import io

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            return parser.parse_args(argv)
    except SystemExit:
        sys.stderr.write(buf.getvalue())
        raise


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
        v = ext[key]
        if key == "dump_dir":
            v = str((Path(base_dir or Path.cwd()) / os.path.expanduser(str(v))).resolve())
        elif key == "dump_layers":
            from ..dump.config import DumpConfigError, layers_text

            try:   # integers only: [1.9, 2.9] must not become 1,2
                v = layers_text(v, f"{EXT_SECTION}.dump_layers")
            except DumpConfigError as e:
                raise PresetError(str(e)) from None
        env[var] = str(v)
    return env


def builtin_model_name(model_path: str | None) -> str | None:
    if model_path and model_path.startswith(BUILTIN_PREFIX):
        name = model_path[len(BUILTIN_PREFIX):]
        if name not in BUILTIN_MODELS:
            raise PresetError(f"unknown built-in model {model_path!r} (known: "
                              f"{', '.join(BUILTIN_PREFIX + m for m in BUILTIN_MODELS)})")
        return name
    return None
