"""The launch plan: from the launcher's own options and SGLang's arguments, the SGLang command, the environment
its processes get, and every automatic decision with its reason (preset, topology, NCCL, dump folder, draft
pre-check). Nothing is started here (start.py does that); a dry run prints the plan and stops.

Order of precedence: command line > preset/config > SGLang defaults; environment variables and SGLang arguments
the user set are never overridden.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from typing import Mapping

from .. import envs
from ..boundary import BadInput
from ..patch_table import ENV_ENABLE
from ..tiny import deepseek_v3 as tiny
from . import dump_dir, eager_prefill, nccl, presets, profile_choice, server_args, topology
from .draft_precheck import DraftCheckFailed, precheck
from .errors import LaunchError
from .settings import Counts, crude_dests, value
from .topology import Topology

LAUNCH_MODULE = "sglang.launch_server"


@dataclasses.dataclass
class Plan:
    sglang_args: list[str]
    env_updates: dict[str, str]  # what we add to the environment of SGLang and its children
    decisions: list[nccl.Decision]
    topology: Topology  # the TP group's view
    tp_size: int
    profile: str
    preset_note: str
    model_note: str
    sglang_note: str
    tiny_dir: str | None = None  # built-in tiny model to make before launching
    dump_dir: str | None = None

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", LAUNCH_MODULE, *self.sglang_args]

    def render(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env_updates.items())
        return "\n".join(
            [
                self.sglang_note,
                self.preset_note,
                self.model_note,
                self.topology.summary(),
                f"decisions (nccl profile {self.profile}, tp {self.tp_size}):",
                nccl.table(self.decisions),
                "SGLang command:",
                "  " + (env + " \\\n  " if env else "") + shlex.join(self.command),
            ]
        )

    def as_dict(self) -> dict:
        """The plan as data: SGLang's command and environment, every decision with its reason, the topology of
        the TP group (with its class)."""
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("decisions", "topology")
        }
        out["command"] = self.command
        out["decisions"] = [{**dataclasses.asdict(d), "applies": d.applies} for d in self.decisions]
        out["topology"] = {"class": self.topology.classify().value, **self.topology.to_dict()}
        return out


@dataclasses.dataclass
class _Sglang:
    """The installed SGLang's side: its parser, ServerArgs field names and version (None: not importable, which
    only a dry run accepts), and the plan's line about it."""

    parser: object
    fields: list | None
    version: str | None
    note: str


@dataclasses.dataclass
class _Asked:
    """What the launch was asked for, read once: the options, SGLang's arguments as typed (`rest`) and with the
    preset's in front (`args`), SGLang's parse of them (`ns`), and what the user set on the command line."""

    ours: object
    rest: list[str]
    env: Mapping[str, str]
    preset: presets.Preset | None
    sglang: _Sglang
    user: set[str]
    args: list[str]
    ns: object

    @property
    def preset_args(self) -> dict:
        return dict(self.preset.server_args) if self.preset else {}

    def get(self, dest: str, default=None):
        return value(self.ns, self.preset_args, self.rest, dest, default)


def build_plan(ours, rest: list[str], env: Mapping[str, str] | None = None) -> Plan:
    """The plan for SGLang's arguments `rest` under the launcher's `ours` (LaunchOptions, or the command line's
    namespace); `env`: the environment SGLang would start in (default: this process's). Raises LaunchError (or
    the refusal of the step that failed: dump folder, NCCL profile) when the launch cannot go ahead."""
    env = envs.environ() if env is None else env
    a, model_note, tiny_dir = _ask(ours, rest, env)
    count = Counts(a.ns, a.preset, rest, a.sglang.parser, a.user)
    tp, nnodes, base_gpu = count("tp_size", 1, 1), count("nnodes", 1, 1), count("base_gpu_id", 0, 0)
    loopback = bool(ours.loopback_only or (a.preset and a.preset.ext.get("loopback_only")))
    if loopback and nnodes > 1:
        raise LaunchError(
            f"--loopback-only{' (preset loopback_only)' if not ours.loopback_only else ''} with "
            f"{count.name('nnodes')} {nnodes}: loopback cannot reach the other nodes; drop one of them"
        )

    full = _topology(ours.topology_file)
    group = topology.group_of(full, tp, base_gpu, env) if full.gpus else full
    # a preset's forced profile must fit the machine (else exit 2); the command line's is the user's word
    choice = profile_choice.choose(ours.nccl_profile, a.preset, group, presets.available_presets())

    decisions = [nccl.env_decision(env, ENV_ENABLE, "1", "our patches in every SGLang process (the installed .pth)")]
    # the dump settings; the folder (--dump-dir > environment > preset) checked here, made at launch
    ext = dict(a.preset.ext) if a.preset else {}
    dump = dump_dir.choose(ours.dump_dir, env, a.preset, presets.ext_env(ext), dry_run=ours.dry_run)
    decisions += dump.decisions
    if a.sglang.fields is not None:
        try:
            decisions += [d for d in [eager_prefill.decision(a.preset, a.sglang.fields, a.user)] if d]
        except presets.PresetError as e:
            raise LaunchError(str(e)) from None
    if full.gpus and len(group.gpus) < tp:
        decisions.append(
            nccl.Decision(
                "GPUs",
                str(len(group.gpus)),
                f"TP={tp} but only {len(group.gpus)} GPU(s) visible from base_gpu_id {base_gpu}: SGLang will fail",
                kind="check",
                action="warn",
            )
        )
    decisions += [choice.decision] if choice.decision else []
    decisions += _nccl_decisions(a, group, choice, tp, nnodes, loopback)
    if not ours.skip_draft_check:
        decisions += _draft_precheck(a)
    env_updates = {d.name: d.value for d in decisions if d.kind == "env" and d.applies}
    bad = envs.problems({**env, **env_updates})  # the values SGLang's processes will see
    if bad:
        raise LaunchError("; ".join(bad))
    args = a.args + nccl.extra_args(decisions)
    if a.sglang.parser:
        presets.quiet_parse(a.sglang.parser, args)  # the final command must parse: fail here, not in SGLang's child
    preset_note = f"preset: {a.preset.name} ({a.preset.path})" if a.preset else "preset: none"
    return Plan(
        args,
        env_updates,
        decisions,
        group,
        tp,
        choice.profile,
        preset_note,
        model_note,
        a.sglang.note,
        tiny_dir=tiny_dir,
        dump_dir=dump.path,
    )


def _ask(ours, rest: list[str], env) -> tuple[_Asked, str, str | None]:
    """The preset and SGLang, each checked; SGLang's arguments with the preset's (those the user did not set)
    in front and built-in model names resolved. (what was asked, the model line, the tiny model to make)."""
    try:
        preset = presets.load(ours.preset) if ours.preset else presets.load(path=ours.config) if ours.config else None
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None
    sg = _load_sglang(ours.dry_run, preset.where if preset else None)
    try:
        if preset:  # SGLang imported (_load_sglang refuses a preset it cannot check)
            presets.validate(preset, sg.fields, sg.version)
            presets.check_values(preset, sg.parser)
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None

    user = presets.user_dests(sg.parser, rest) if sg.parser else crude_dests(rest)
    preset_args = dict(preset.server_args) if preset else {}
    if preset:  # a field this release has but no flag for, at its default: nothing to pass (and nothing to undo)
        defaults = server_args.installed_field_defaults()
        preset_args = {
            k: v
            for k, v in preset_args.items()
            if presets.has_flag(sg.parser, k) or k not in defaults or defaults[k] != v
        }
    try:
        from_preset = presets.to_cli_args(
            {k: v for k, v in preset_args.items() if k not in user},
            sg.parser,
            where=preset.where if preset else "preset",
        )
        args, model_note, tiny_dir = _resolve_builtin(from_preset + list(rest), ours.dry_run)
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None
    ns = presets.quiet_parse(sg.parser, args) if sg.parser else None
    return _Asked(ours, rest, env, preset, sg, user, args, ns), model_note, tiny_dir


def _resolve_builtin(args: list[str], dry_run: bool) -> tuple[list[str], str, str | None]:
    """Replace builtin:NAME model paths by the real folder; (args, note, folder to make)."""

    out, note, make = [], "model: as given", None
    for tok in args:
        flag, eq, val = tok.partition("=") if tok.startswith("--") else ("", "", tok)
        name = presets.builtin_model_name(val) if (eq or not flag) else None
        if name:
            path = str(tiny.builtin_dir(name))
            exists = os.path.exists(os.path.join(path, ".complete"))
            note = f"model: {val} -> {path} " + (
                "(exists)" if exists else "(would be created on first use)" if dry_run else "(creating now)"
            )
            make = path
            tok = f"{flag}={path}" if eq else path
        out.append(tok)
    return out, note, make


def _load_sglang(dry_run: bool, preset_name: str | None) -> _Sglang:
    """SGLang's parser, fields and version. A dry run without a preset goes on without them when SGLang cannot
    be imported; a preset that cannot be validated stops every launch, dry run included."""
    try:
        fields, version = presets.server_args_fields()
        return _Sglang(
            presets.sglang_parser(),
            fields,
            version,
            f"sglang: {version} (flags and presets checked against its {len(fields)} server arguments)",
        )
    except Exception as e:
        why = f"cannot import SGLang ({type(e).__name__}: {e})"
        fix = "install SGLang into this environment: pip install sglang (from a checkout: pip install '.[sglang]')"
        if preset_name:
            raise LaunchError(
                f"{why}, so preset {preset_name} cannot be checked against SGLang's server arguments; {fix}"
            ) from e
        if not dry_run:
            raise LaunchError(f"{why}; {fix}") from e
        return _Sglang(None, None, None, f"sglang: NOT importable ({type(e).__name__}: {e}); flags not checked")


def _nccl_decisions(a: _Asked, group: Topology, choice, tp: int, nnodes: int, loopback: bool) -> list:
    """NCCL and SGLang settings from the TP group's topology; a flag the user or the preset set is theirs."""
    parser, ns, preset_args = a.sglang.parser, a.ns, a.preset_args
    available = {act.dest for act in parser._actions} if parser else None
    user_flags = set(a.user) | set(preset_args)
    enabled = {d for d in user_flags if (getattr(ns, d, None) if ns is not None else preset_args.get(d, True))}
    return nccl.decide(
        group,
        profile=choice.profile,
        tp_size=tp,
        nnodes=nnodes,
        env=a.env,
        user_flags=user_flags,
        available_flags=available,
        enabled_flags=enabled,
        loopback_only=loopback,
        forced_by=choice.forced_by,
    )


def _topology(path: str | None) -> Topology:

    if not path:
        return topology.detect()
    try:
        return topology.Topology.load(path)
    except BadInput as e:  # names the file and the key
        raise LaunchError(f"--topology-file {e}") from None


# the server flags a draft's layout may find it served wrongly under (draft/arch launch_problems)
_DRAFT_FLAGS = ("speculative_num_draft_tokens", "speculative_dflash_block_size")


def _draft_precheck(a: _Asked) -> list[nccl.Decision]:

    try:
        d = precheck(
            a.get("speculative_algorithm"),
            a.get("speculative_draft_model_path"),
            a.get("model_path"),
            a.sglang.version,
            dtype=a.get("dtype"),
            flags={f: a.get(f) for f in _DRAFT_FLAGS},
        )
    except DraftCheckFailed as e:
        raise LaunchError(
            f"the draft would not serve correctly:\n{e}\n(convert a speculators/SpecForge "
            f"checkpoint with `python -m sglang_eagle3_ext.convert SRC DST`; --skip-draft-check "
            f"starts SGLang anyway)"
        ) from None
    return [d] if d else []
