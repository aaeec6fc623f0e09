"""`python -m sglang_eagle3_ext.launch_server [ours] <any SGLang argument>`: SGLang's launcher with
presets, topology-aware NCCL settings, an optional all-reduce preflight, and our patches active in
every SGLang process.

    python -m sglang_eagle3_ext.launch_server --preset tiny-dump             # serve the tiny model, dumping
    python -m sglang_eagle3_ext.launch_server --preset tiny-dump --dry-run   # show the plan, start nothing

Order of precedence: command line > preset/config > SGLang defaults; environment variables and
SGLang arguments the user set are never overridden (each automatic choice is printed with its reason).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import sys

from .. import envs
from ..launch import nccl
from ..launch.topology import Topology
from ..patch_table import ENV_ENABLE

LAUNCH_MODULE = "sglang.launch_server"


def our_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: never swallow an abbreviated SGLang option (e.g. --pre... / --config-...)
    p = argparse.ArgumentParser(
        prog="python -m sglang_eagle3_ext.launch_server", add_help=False, allow_abbrev=False,
        description="SGLang launcher with EAGLE-3 patches, presets, NCCL settings from the GPU topology, and a "
                    "preflight all-reduce check. Every other argument goes to SGLang unchanged; a flag that is neither "
                    "ours nor SGLang's (a typo, an abbreviation of ours) is refused before anything starts.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", metavar="NAME", help="a server_configs/NAME.yaml preset (see --list-presets)")
    src.add_argument("--config", metavar="FILE", help="a preset-format YAML file (SGLang --config files work too)")
    p.add_argument("--list-presets", action="store_true", help="print the shipped presets and exit")
    p.add_argument("--nccl-profile", choices=nccl.PROFILES, default=None,
                   help="auto (default): from the detected topology; pcie/nvlink: force; off: set nothing")
    p.add_argument("--preflight", action="store_true",
                   help="all-reduce check across the TP group's GPUs before starting SGLang")
    p.add_argument("--loopback-only", action="store_true",
                   help="single node: NCCL/gloo bootstrap on lo and IB off (breaks cross-node groups such as RLHF "
                        "weight sync; preset key loopback_only)")
    p.add_argument("--preflight-timeout", type=_seconds, default=120.0, metavar="S",
                   help="seconds per preflight attempt (default 120; a hang is retried once with NCCL_P2P_DISABLE=1)")
    p.add_argument("--dry-run", action="store_true",
                   help="print topology, decisions and the SGLang command; start nothing (works without GPUs)")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="dump prefill hidden states into DIR (made if missing; replaces a preset's dump_dir; "
                        "passed to SGLang's processes as SGLANG_EAGLE3_EXT_DUMP_DIR)")
    p.add_argument("--topology-file", metavar="F", help="read the topology from JSON instead of NVML")
    p.add_argument("--dump-topology", action="store_true", help="print the detected topology as JSON and exit")
    p.add_argument("--skip-draft-check", action="store_true",
                   help="do not run `check` on --speculative-draft-model-path before starting SGLang")
    p.add_argument("-h", "--help", action="store_true", help="this help, then SGLang's")
    from . import common as cli_common

    cli_common.add_json_out(p, "the plan (--dry-run; a real launch writes it to PATH first)")
    return cli_common.finish(p, "launch")


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return v


class LaunchError(SystemExit):
    """A refusal with an actionable message (exit code 2)."""

    def __init__(self, msg: str):
        super().__init__(f"sglang_eagle3_ext.launch_server: error: {msg}")


@dataclasses.dataclass
class Plan:
    sglang_args: list[str]
    env_updates: dict[str, str]        # what we add to the environment of SGLang and its children
    decisions: list[nccl.Decision]
    topology: Topology                 # the TP group's view
    tp_size: int
    profile: str
    preset_note: str
    model_note: str
    sglang_note: str
    tiny_dir: str | None = None        # built-in tiny model to make before launching
    dump_dir: str | None = None

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", LAUNCH_MODULE, *self.sglang_args]

    def render(self) -> str:
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env_updates.items())
        return "\n".join([
            self.sglang_note, self.preset_note, self.model_note,
            self.topology.summary(),
            f"decisions (nccl profile {self.profile}, tp {self.tp_size}):",
            nccl.table(self.decisions),
            "SGLang command:",
            "  " + (envs + " \\\n  " if envs else "") + shlex.join(self.command),
        ])


def _resolve_builtin(args: list[str], dry_run: bool) -> tuple[list[str], str, str | None]:
    """Replace builtin:NAME model paths by the real folder; (args, note, folder to make)."""
    from ..tiny import deepseek_v3 as tiny
    from ..launch import presets

    out, note, make = [], "model: as given", None
    for tok in args:
        flag, eq, val = tok.partition("=") if tok.startswith("--") else ("", "", tok)
        name = presets.builtin_model_name(val) if (eq or not flag) else None
        if name:
            path = str(tiny.builtin_dir(name))
            exists = os.path.exists(os.path.join(path, ".complete"))
            note = (f"model: {val} -> {path} "
                    + ("(exists)" if exists else "(would be created on first use)" if dry_run else "(creating now)"))
            make = path
            tok = f"{flag}={path}" if eq else path
        out.append(tok)
    return out, note, make


def _load_sglang(dry_run: bool):
    """(parser, field names, version, note); parser None when SGLang can't be imported (dry-run only)."""
    from ..launch import presets

    try:
        fields, version = presets.server_args_fields()
        return presets.sglang_parser(), fields, version, f"sglang: {version}"
    except Exception as e:  # noqa: BLE001 - ImportError or a broken install: say which
        if not dry_run:
            raise LaunchError(f"cannot import SGLang ({type(e).__name__}: {e}); "
                              f"install SGLang into this environment: pip install sglang (from a checkout: "
                              f"pip install '.[sglang]')") from e
        return None, None, None, f"sglang: NOT importable ({type(e).__name__}: {e}); preset not validated"


def _crude_dests(argv: list[str]) -> set[str]:
    return {t[2:].split("=", 1)[0].replace("-", "_") for t in argv if t.startswith("--")}


def _value(ns, preset_args: dict, rest: list[str], dest: str, default):
    if ns is not None:
        return getattr(ns, dest, default)
    flag, found = "--" + dest.replace("_", "-"), None
    for i, t in enumerate(rest):  # no parser (dry-run without SGLang): last occurrence wins
        if t == flag and i + 1 < len(rest):
            found = rest[i + 1]
        elif t.startswith(flag + "="):
            found = t.split("=", 1)[1]
    return found if found is not None else preset_args.get(dest, default)


def build_plan(ours: argparse.Namespace, rest: list[str], env=None) -> Plan:
    from ..launch import dump_dir, presets, profile_choice, topology

    env = os.environ if env is None else env
    try:
        preset = presets.load(ours.preset) if ours.preset else presets.load(path=ours.config) if ours.config else None
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None
    parser, fields, version, sglang_note = _load_sglang(ours.dry_run)
    preset_args = dict(preset.server_args) if preset else {}
    ext = dict(preset.ext) if preset else {}
    try:
        if preset and fields is not None:
            presets.validate(preset, fields, version)
            presets.check_values(preset, parser)
        elif preset:
            presets.validate(dataclasses.replace(preset, server_args={}), [], version or "?")
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None

    user = presets.user_dests(parser, rest) if parser else _crude_dests(rest)
    try:
        from_preset = presets.to_cli_args({k: v for k, v in preset_args.items() if k not in user}, parser,
                                          where=preset.where if preset else "preset")
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None
    try:
        args, model_note, tiny_dir = _resolve_builtin(from_preset + list(rest), ours.dry_run)
    except presets.PresetError as e:
        raise LaunchError(str(e)) from None
    ns = presets.quiet_parse(parser, args) if parser else None
    count = _Counts(ns, preset, rest, parser, user)
    tp, nnodes, base_gpu = count("tp_size", 1, 1), count("nnodes", 1, 1), count("base_gpu_id", 0, 0)
    loopback = bool(ours.loopback_only or ext.get("loopback_only"))
    if loopback and nnodes > 1:
        raise LaunchError(f"--loopback-only{' (preset loopback_only)' if not ours.loopback_only else ''} with "
                          f"{count.name('nnodes')} {nnodes}: loopback cannot reach the other nodes; drop one of them")

    full = _topology(ours.topology_file)
    group = topology.group_of(full, tp, base_gpu, env) if full.gpus else full
    # a preset's forced profile must fit the machine (else exit 2); the command line's is the user's word
    choice = profile_choice.choose(ours.nccl_profile, preset, group, presets.available_presets())

    decisions = [nccl.env_decision(env, ENV_ENABLE, "1", "our patches in every SGLang process (the installed .pth)")]
    # the dump settings; the folder (--dump-dir > environment > preset) checked here, made by launch()
    dump = dump_dir.choose(ours.dump_dir, env, preset, presets.ext_env(ext), dry_run=ours.dry_run)
    decisions += dump.decisions
    if full.gpus and len(group.gpus) < tp:
        decisions.append(nccl.Decision("GPUs", str(len(group.gpus)), f"TP={tp} but only {len(group.gpus)} GPU(s) "
                                       f"visible from base_gpu_id {base_gpu}: SGLang will fail", kind="check",
                                       action="warn"))
    available = {a.dest for a in parser._actions} if parser else None
    user_flags = set(user) | set(preset_args)
    enabled = {d for d in user_flags if (getattr(ns, d, None) if ns is not None else preset_args.get(d, True))}
    decisions += [choice.decision] if choice.decision else []
    decisions += nccl.decide(group, profile=choice.profile, tp_size=tp, nnodes=nnodes, env=env, user_flags=user_flags,
                             available_flags=available, enabled_flags=enabled, loopback_only=loopback,
                             forced_by=choice.forced_by)
    if not ours.skip_draft_check:
        decisions += _draft_precheck(ns, preset_args, rest, version)
    env_updates = {d.name: d.value for d in decisions if d.kind == "env" and d.applies}
    bad = envs.problems({**env, **env_updates})  # the values SGLang's processes will see
    if bad:
        raise LaunchError("; ".join(bad))
    args += nccl.extra_args(decisions)
    if parser:
        presets.quiet_parse(parser, args)  # the final command must parse: fail here, not in SGLang's child
    preset_note = (f"preset: {preset.name} ({preset.path})" if preset else "preset: none")
    return Plan(args, env_updates, decisions, group, tp, choice.profile, preset_note, model_note, sglang_note,
                tiny_dir=tiny_dir, dump_dir=dump.path)


def _topology(path: str | None) -> Topology:
    from ..boundary import BadInput
    from ..launch import topology

    if not path:
        return topology.detect()
    try:
        return topology.Topology.load(path)
    except BadInput as e:   # names the file and the key
        raise LaunchError(f"--topology-file {e}") from None


class _Counts:
    """Whole-number settings (TP size, nodes, first GPU) read once, checked, and named as the user gave them:
    the flag typed (`--tp`, an abbreviation SGLang accepts) or the preset file and key."""

    def __init__(self, ns, preset, rest: list[str], parser, user_dests: set[str]):
        self.ns, self.preset, self.rest, self.parser, self.user = ns, preset, rest, parser, user_dests
        self.preset_args = preset.server_args if preset else {}

    def __call__(self, dest: str, default: int, minimum: int) -> int:
        value = _value(self.ns, self.preset_args, self.rest, dest, default)
        value = default if value is None else value
        try:
            n = int(value) if not isinstance(value, (bool, float)) else None
        except (TypeError, ValueError):
            n = None
        if n is None or n < minimum:
            raise LaunchError(f"{self.name(dest)}: expected a whole number >= {minimum}, got {value!r}")
        return n

    def name(self, dest: str) -> str:
        if dest not in self.user and dest in self.preset_args:
            return f"{self.preset.where}: key {dest!r}"
        typed = None
        for tok in self.rest:
            opt = tok.split("=", 1)[0] if tok.startswith("--") else None
            if opt and self._dest_of(opt) == dest:
                typed = opt
        return typed or "--" + dest.replace("_", "-")

    def _dest_of(self, opt: str) -> str | None:
        if self.parser is None:
            return opt[2:].replace("-", "_")
        known = self.parser._option_string_actions
        if opt in known:
            return known[opt].dest
        dests = {a.dest for s, a in known.items() if s.startswith(opt)}   # argparse's abbreviations
        return dests.pop() if len(dests) == 1 else None


def _draft_precheck(ns, preset_args: dict, rest: list[str], version: str | None) -> list[nccl.Decision]:
    from ..launch.draft_precheck import DraftCheckFailed, precheck

    get = lambda dest: _value(ns, preset_args, rest, dest, None)  # noqa: E731
    try:
        d = precheck(get("speculative_algorithm"), get("speculative_draft_model_path"), get("model_path"), version,
                     dtype=get("dtype"))
    except DraftCheckFailed as e:
        raise LaunchError(f"the EAGLE-3 draft would not serve correctly:\n{e}\n(convert a speculators/SpecForge "
                          f"checkpoint with `python -m sglang_eagle3_ext.convert SRC DST`; --skip-draft-check "
                          f"starts SGLang anyway)") from None
    return [d] if d else []


def _print_help(parser: argparse.ArgumentParser) -> None:
    parser.print_help()
    print("\n" + "=" * 30 + " SGLang's own arguments (passed through unchanged) " + "=" * 30)
    try:
        from ..launch import presets

        presets.sglang_parser().print_help()
    except Exception as e:  # noqa: BLE001
        print(f"(SGLang not importable here: {type(e).__name__}: {e})")


def _run_preflight(plan: Plan, ours, child_env: dict) -> None:
    from ..launch import preflight

    n = plan.tp_size
    if n < 2 or len(plan.topology.gpus) < n:
        print(f"preflight: skipped ({'TP=1: nothing to all-reduce' if n < 2 else f'{len(plan.topology.gpus)} GPU(s) seen, TP={n}'})",
              file=sys.stderr)
        return
    hints = [msg for _, msg in nccl.host_warnings(plan.topology)]
    print(f"preflight: all-reduce across {n} GPUs, up to {ours.preflight_timeout:.0f}s per attempt ...",
          file=sys.stderr, flush=True)
    res = preflight.run_preflight(n, env=child_env, timeout=ours.preflight_timeout, host_hints=hints)
    print(res.report(), file=sys.stderr)
    if not res.ok:
        raise LaunchError(res.message)
    for d in res.decisions:
        print(f"[sglang_eagle3_ext] {d.name}={d.value}: {d.reason}", file=sys.stderr)
        plan.decisions.append(d)
        plan.env_updates[d.name] = d.value


def launch(plan: Plan, ours) -> None:
    """Run SGLang's own `python -m sglang.launch_server` in this process.

    Why runpy and not exec: it executes exactly the installed release's `__main__` block
    (0.5.10: prepare_server_args -> run_server; 0.5.14+: load_plugins() first; 0.5.23: resolve_once),
    so nothing here depends on that release's internals, while our apply() patches stay active in
    this process (the HTTP/tokenizer side); the spawned scheduler processes get them through
    SGLANG_EAGLE3_EXT=1 and the installed .pth. alter_sys=True makes sys.argv[0]/__main__ look
    like `python -m sglang.launch_server`, which is what multiprocessing's spawn re-imports.
    """
    import runpy

    from .. import apply
    from ..launch.dump_dir import make

    child_env = {**os.environ, **plan.env_updates}
    make(plan.dump_dir)   # first: a refusal costs nothing yet
    if ours.preflight:
        _run_preflight(plan, ours, child_env)
    if plan.tiny_dir:
        from ..tiny.deepseek_v3 import ensure_builtin

        ensure_builtin(plan.tiny_dir)
    os.environ.update(plan.env_updates)
    apply()
    sys.argv = [LAUNCH_MODULE, *plan.sglang_args]
    runpy.run_module(LAUNCH_MODULE, run_name="__main__", alter_sys=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = our_parser()
    ours, rest = parser.parse_known_args(argv)
    if ours.help:
        _print_help(parser)
        return 0
    from . import launch_flags as launch_cli

    launch_cli.check_flags(parser, ours, rest)   # neither ours nor SGLang's (`--dry-runn`): refused, nothing starts
    if ours.list_presets:
        launch_cli.list_presets(ours)
        return 0
    if ours.dump_topology:
        from ..launch import topology

        print(topology.detect().to_json())
        return 0
    plan = build_plan(ours, rest)
    text = launch_cli.write_plan(plan, ours)   # --json [PATH]
    if ours.dry_run:
        if text:
            print(plan.render())
        if text and ours.preflight:
            from ..launch.preflight import DEFAULT_SIZES, _size

            print(f"preflight: would all-reduce {' and '.join(map(_size, DEFAULT_SIZES))} across {plan.tp_size} "
                  f"GPU(s), {ours.preflight_timeout:.0f}s per attempt, retried once with NCCL_P2P_DISABLE=1")
        return 0
    print(plan.render(), file=sys.stderr)  # the decisions, said once, before SGLang's own log starts
    launch(plan, ours)
    return 0


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("launch", main))
