"""A launch's dump settings: the preset's `eagle3_ext:` values (a variable the user set is kept), and the
folder it dumps into: `--dump-dir` (command line) > SGLANG_EAGLE3_EXT_DUMP_DIR (environment) > the preset's
`dump_dir` (one name: envs.DUMP_DIR, its preset key declared beside it).

Checked when the plan is made, whichever way it was given, and made (mkdir -p) by `make` as the launch's first
step: otherwise a file in its place or a folder this user cannot write stops every scheduler at start-up,
minutes later, with the reason in one rank's log. A dry run makes nothing: the plan says whether the folder
exists or would be created, and what this machine would refuse (a folder it cannot make or write here is a
warning in a dry run's plan, an error otherwise; something that is not a folder is an error in both).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

from .. import envs
from ..boundary import BadInput, NotWritable, writable_dir
from ..dump.config import DumpConfigError, pending_budget_bytes
from .errors import LaunchError
from .nccl import Decision, env_decision

PRESET_KEY = envs.VARS[envs.DUMP_DIR].preset_key
WHAT = "dump dir"
REASON = "prefill hidden-state dumps go here (turns the dump patches on)"
REASONS = {envs.DUMP_LAYERS: "HF hidden_states indices to dump"}


@dataclasses.dataclass
class DumpDir:
    path: str | None  # what SGLang's processes will dump into (None: no dumping)
    decisions: list[Decision]  # one line for the variable (+ one warning when a dry run foresees a refusal)


class DumpDirRefused(LaunchError):
    """The folder cannot be a dump dir; the message names where it came from and why (exit 2)."""


def choose(flag: str | None, env: Mapping[str, str], preset, preset_env: dict[str, str], dry_run: bool) -> DumpDir:
    """`flag`: --dump-dir as typed; `preset_env`: the preset's variables (presets.ext_env: dump_dir absolute)."""
    folder = _folder(flag, env, preset, preset_env.get(envs.DUMP_DIR), dry_run)
    _check_budget({**preset_env, **env})
    for var, val in preset_env.items():
        if var != envs.DUMP_DIR:
            folder.decisions.append(env_decision(env, var, val, f"preset {preset.name}: {REASONS.get(var, 'ours')}"))
    return folder


def _folder(flag: str | None, env: Mapping[str, str], preset, preset_value: str | None, dry_run: bool) -> DumpDir:
    var = envs.DUMP_DIR
    from_env = envs.get(var, env)  # empty means unset, as everywhere
    raw = preset.ext.get(PRESET_KEY) if preset and preset_value else None
    by_preset = f"preset {preset.name}'s {PRESET_KEY} {raw}" if raw else None
    if flag is not None:
        over = [x for x in (by_preset, f"{var}={from_env} from the environment" if from_env else None) if x]
        path, state, warn = _check(flag, "--dump-dir", dry_run)
        why = f"--dump-dir (command line){' over ' + ' and '.join(over) if over else ''}: {REASON}; {state}"
        return DumpDir(str(path), [Decision(var, str(path), why)] + warn)
    if from_env:
        path, state, warn = _check(from_env, f"{var} (environment)", dry_run)
        unused = f"; {by_preset} not used" if by_preset else ""
        return DumpDir(from_env, [Decision(var, from_env, f"user set it{unused}; {state}", action="user")] + warn)
    if preset_value:
        path, state, warn = _check(preset_value, f"{preset.where}: eagle3_ext.{PRESET_KEY} {raw} ->", dry_run)
        return DumpDir(str(path), [Decision(var, str(path), f"preset {preset.name}: {REASON}; {state}")] + warn)
    return DumpDir(None, [])


def _check_budget(env: Mapping[str, str]) -> None:
    """The host memory the dump's writer pins at start-up: above this machine's memory every scheduler would
    fail then; a dry run refuses it as the launch would."""

    if not envs.is_set(envs.DUMP_MAX_PENDING_MB, env):
        return
    try:
        pending_budget_bytes(env)
    except DumpConfigError as e:
        raise DumpDirRefused(str(e)) from None


def make(path: str | None) -> None:
    """mkdir -p the plan's dump dir (the launch's first step); DumpDirRefused when it cannot be made or written."""
    if not path:
        return
    try:
        writable_dir(path, WHAT, make=True)
    except BadInput as e:  # changed since the plan was made
        raise DumpDirRefused(f"{envs.DUMP_DIR} {e}") from None


def _check(text: str, source: str, dry_run: bool):
    """(absolute path, state for the plan, [warning]) or DumpDirRefused naming `source`."""
    try:
        path = writable_dir(text, WHAT)
    except NotWritable as e:
        if not dry_run:
            raise DumpDirRefused(f"{source} {e}; choose a folder this user can write") from None
        note = Decision("(dump dir)", None, f"{source} {e}: the launch would stop here", kind="check", action="warn")
        return os.path.abspath(os.path.expanduser(text)), "cannot be made or written here", [note]
    except BadInput as e:
        raise DumpDirRefused(f"{source} {e}") from None
    state = "exists" if path.is_dir() else "would be created" if dry_run else "made at launch"
    return path, state, []
