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
import sys

from ..json_file import write_json
from ..launch import command_line, presets, start
from ..launch.options import LaunchOptions
from ..launch.plan import build_plan
from ..options.parser import add_options
from . import args as cli_args
from . import common as cli_common
from .run import run_command


def our_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: never swallow an abbreviated SGLang option (e.g. --pre... / --config-...)
    p = argparse.ArgumentParser(
        prog="python -m sglang_eagle3_ext.launch_server",
        add_help=False,
        allow_abbrev=False,
        description="SGLang launcher with EAGLE-3 patches, presets, NCCL settings from the GPU topology, and a "
        "preflight all-reduce check. Every other argument goes to SGLang unchanged (--help-sglang lists "
        "SGLang's); flags are spelled out in full, as SGLang's documentation writes them (--tp 8 too): a "
        "typo or an abbreviation is refused before anything starts.",
    )
    add_options(p.add_mutually_exclusive_group(), LaunchOptions, only=("preset", "config"))
    add_options(p, LaunchOptions, skip=("preset", "config"))
    p.add_argument("-h", "--help", action="store_true", help="this help (launch's own flags)")
    p.add_argument("--help-sglang", action="store_true", help="SGLang's own flags, passed through unchanged")
    cli_args.add_json_out(p, "the plan (--dry-run; a real launch writes it to PATH first)")
    return cli_args.finish(p, "launch")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = our_parser()
    ours, rest = parser.parse_known_args(argv)
    if ours.help:
        parser.print_help()
        print("\nEvery other flag goes to SGLang unchanged: `--help-sglang` lists them.")
        return 0
    if ours.help_sglang:
        command_line.print_sglang_help()
        return 0
    command_line.check_flags(parser, ours, rest)  # neither ours nor SGLang's (`--dry-runn`): refused, nothing starts
    if ours.list_presets:
        return run_command("launch", presets.available_presets, "\n".join, json=ours.json, json_check=None)
    if ours.dump_topology:
        from ..launch import topology

        print(topology.detect().to_json())
        return 0
    plan = build_plan(ours, rest)
    if not ours.dry_run:
        start.require_accelerator(plan)  # no GPU: one line naming --dry-run, before the plan or anything is written
    if ours.json:  # --json [PATH]: the plan as JSON (alone on stdout with no PATH)
        write_json(ours.json, plan.as_dict())
    text = ours.json != "-"
    if ours.dry_run:
        if text:
            print(plan.render())
        if text and ours.preflight:
            from ..launch.preflight import dry_run_line

            print(dry_run_line(plan.tp_size, ours.preflight_timeout))
        return 0
    print(plan.render(), file=sys.stderr)  # the decisions, said once, before SGLang's own log starts
    start.launch(plan, ours.preflight, ours.preflight_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("launch", main))
