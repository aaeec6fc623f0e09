"""Prompts in, a checked, predicted, servable draft out: dump, export, train, convert, check, eval and a report in
one command.

    sglang-eagle3 build --data PROMPTS.jsonl --target DIR --preset NAME --out OUT [--generate] [train's flags]
    sglang-eagle3 build --dump-dir DUMP --target DIR --out OUT         # from an existing dump

Each stage writes under OUT what its single command writes: dump/, export/, train/, draft/, check.json,
eval.json, report.html and report.json (the dump's size, the training curve, the predicted accept length per
draft position, the command that serves the draft), and build_config.yaml (the resolved settings; `--config`
reads it back). A re-run skips every stage that finished from the same inputs and settings (train continues
from its last epoch) and refuses, naming `--from STAGE`, when they changed; `--from STAGE` redoes that stage
and the later ones. `--config FILE`: a YAML mapping of this command's and train's flags
(`lr: 0.003`); the command line overrides it. `--dry-run`: the plan (stages, folders, the dump's size at this
target's width, training memory per rank) without starting anything.
"""

from __future__ import annotations

import argparse
import sys

from ..boundary import Refused
from ..options.parser import add_options, options_from
from ..options.schema import flag_fields
from ..recipe.config import config_rules, dump_config, read_config
from ..recipe.options import CONFIG, GROUPS, TRAIN_SET_BY_BUILD, BuildOptions
from ..recipe.report import render_text
from ..server.tokenizer import load_tokenizer
from ..training.options import ScoreOptions, TrainOptions
from . import args as cli_args
from . import common as cli_common
from . import train as train_cli
from .run import run_command


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.parser("build", cli_args.doc_description(__doc__, paragraphs=3))
    p.add_argument(
        "--config",
        metavar="FILE",
        type=CONFIG,
        help="YAML mapping of build's and train's flags (the command line overrides it)",
    )
    grouped = [name for names in GROUPS.values() for name in names]
    add_options(p, BuildOptions, skip=grouped)
    groups = {title: p.add_argument_group(title) for title in GROUPS}
    for title, names in GROUPS.items():
        add_options(groups[title], BuildOptions, only=names)
    groups["running"].add_argument(
        "--dry-run", action="store_true", help="print the plan; start, train and write nothing"
    )
    cli_args.add_json_out(p, "the report (with --dry-run: the plan)")
    cli_args.add_verbosity(p, quiet="no progress bars")
    t = p.add_argument_group("train (the same flags as `sglang-eagle3 train`)")
    train_cli.add_train_flags(t, skip=TRAIN_SET_BY_BUILD)
    return cli_args.finish(p, "build")


def parse(argv) -> tuple[argparse.Namespace, dict]:
    """The flags over the config file's values over the defaults; (namespace, the resolved settings)."""
    p = build_parser()
    pre = cli_args.parser("build", add_help=False)
    pre.add_argument("--config", type=CONFIG)
    known, _ = pre.parse_known_args(argv)
    rules = config_rules()
    if known.config:
        p.set_defaults(**read_config(known.config, rules))
    a = p.parse_args(argv)
    train_cli.check_score_flags(p, a)
    # the settings; --from says what to redo, not how anything is built
    resolved = {k: getattr(a, k) for k in rules if k != "from_stage" and getattr(a, k, None) not in (None, False)}
    return a, resolved


def options(a: argparse.Namespace):

    train = {f.name: getattr(a, f.name) for f in flag_fields(TrainOptions) if f.name not in TRAIN_SET_BY_BUILD}
    # the epoch score's settings when given (a build without them keeps its train stage's fingerprint)
    train.update({f.name: getattr(a, f.name) for f in flag_fields(ScoreOptions) if getattr(a, f.name) is not None})

    def say(m: str) -> None:
        print(f"build: {m}", file=sys.stderr, flush=True)

    return options_from(a, BuildOptions, train=train, say=say, quiet=a.quiet)


def main(argv=None) -> int:
    from ..recipe.plan import dry_run, plan_lines
    from ..recipe.run import Run, build

    a, resolved = parse(argv)
    if not a.out and not a.dry_run:
        raise Refused("--out is required: the folder every stage writes into")
    o = options(a)
    if a.dry_run:
        return run_command("build", lambda: dry_run(o), lambda rep: "\n".join(plan_lines(rep)), json=a.json)
    run = Run(o=o, out=None, redo=set(), say=o.say, load_tokenizer=load_tokenizer)
    return run_command(
        "build",
        lambda: build(o, run, config_text=dump_config(resolved)),
        render_text,
        json=a.json,
        stopped=run.stopped,
        verbose=a.verbose,
        bars=True,
    )


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("build", main))
