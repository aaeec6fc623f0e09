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

from ..build import STAGES
from ..build.config import BOOL, dump_config
from ..build.options import BuildOptions
from ..build.report import render_text
from ..training.options import TrainOptions
from ..training.report import TrainDraftError
from . import common as cli_common
from . import train as train_cli
from .inputs import file_in, folder_in, folder_out, port, preset, server_url
from .interrupts import interrupted_line, interruptible
from .output import library_output

_CONFIG = file_in("give a YAML file of build's and train's flags")
_TARGET = folder_in("give the target model's local folder")
# train's flags that build sets itself (its folders, resuming, planning, output)
_TRAIN_OWN = {"data", "target", "out", "force", "resume", "dry_run", "json", "quiet", "verbose", "help", "debug"}


def _add_sources(g) -> None:
    """Where the dump comes from: prompts to dump (a server --preset starts, or --url), or an existing dump."""
    g.add_argument(
        "--data",
        metavar="PROMPTS",
        type=file_in(
            "give the JSONL prompts file to dump",
            if_folder="--data takes the JSONL prompts file; to start from an existing dump, pass it as --dump-dir",
        ),
        help='JSONL prompts ({"id", "input_ids" | "text" | "messages"}) to dump',
    )
    g.add_argument(
        "--dump-dir",
        metavar="DIR",
        type=folder_in(
            "give the folder a dumping server wrote (its SGLANG_EAGLE3_EXT_DUMP_DIR)",
            if_file="--dump-dir takes a dump folder; pass a prompts file as --data",
        ),
        help="start from this existing dump (the dump stage is skipped)",
    )
    g.add_argument("--url", type=server_url, help="a running dumping server (its dump folder must be OUT/dump)")
    g.add_argument(
        "--preset",
        metavar="NAME",
        type=preset,
        help="start a dumping server with this launch preset and --target, stopped when the dump is done",
    )
    g.add_argument("--port", type=port, default=30000, help="the port of the server --preset starts")


def build_parser() -> argparse.ArgumentParser:
    c = cli_common
    p = c.parser("build", c.doc_description(__doc__, paragraphs=3))
    p.add_argument(
        "--config",
        metavar="FILE",
        type=_CONFIG,
        help="YAML mapping of build's and train's flags (the command line overrides it)",
    )
    p.add_argument(
        "--out",
        type=folder_out("give a new or empty folder, or an earlier build's"),
        help="where every stage's output goes (new, empty, or an earlier build's)",
    )
    p.add_argument(
        "--target",
        type=_TARGET,
        help="the target model's local folder (served for the dump, its tokenizer, train, check, eval)",
    )
    c.hidden_alias(p, "--model-path", dest="target", type=_TARGET)
    g = p.add_argument_group("dump")
    _add_sources(g)
    g.add_argument(
        "--server-wait-s",
        type=c.positive_float,
        default=1800.0,
        help="how long the server --preset starts may take to become healthy",
    )
    g.add_argument(
        "--generate", action="store_true", help="the target answers each prompt first; prompt + answer is dumped"
    )
    g.add_argument("--max-new-tokens", type=c.positive_int, default=512, help="answer length with --generate")
    g.add_argument("--temperature", type=c.non_negative_float, default=0.0, help="sampling temperature with --generate")
    g.add_argument("--concurrency", type=c.positive_int, default=8, help="dump requests in flight")
    g.add_argument("--limit", type=c.positive_int, help="dump only the first N prompts")
    g.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let --target's tokenizer run the code it ships (text prompts; only a model you trust)",
    )
    g.add_argument("--timeout", type=c.positive_float, default=600.0, help="seconds for one dump request")
    g.add_argument("--wait-s", type=c.non_negative_float, default=300.0, help="how long to wait for the last writes")
    g.add_argument("--export-workers", type=c.positive_int, default=8, help="samples exported in parallel")
    s = p.add_argument_group("eval and serving")
    s.add_argument(
        "--spec-steps",
        type=c.positive_int,
        default=3,
        help="--speculative-num-steps of the prediction and of the serve command",
    )
    s.add_argument("--eval-samples", type=c.positive_int, help="predict on at most this many held-out samples")
    s.add_argument("--eval-dtype", choices=("bf16", "fp32"), default="bf16", help="eval's weights and activations")
    s.add_argument(
        "--serve-preset",
        metavar="NAME",
        help="the preset of the serve command (default: the dump preset's serving twin, NAME-dump -> NAME)",
    )
    r = p.add_argument_group("running")
    r.add_argument("--gpus", type=c.positive_int, default=1, help="train on this many GPUs (torchrun) when > 1")
    r.add_argument("--from", dest="from_stage", choices=STAGES, help="redo this stage and the ones after it")
    r.add_argument("--dry-run", action="store_true", help="print the plan; start, train and write nothing")
    c.add_json_out(p, "the report (with --dry-run: the plan)")
    c.add_verbosity(p, quiet="no progress bars")
    t = p.add_argument_group("train (the same flags as `sglang-eagle3 train`)")
    for action in train_cli.build_parser()._actions:
        if action.dest not in _TRAIN_OWN:
            t._add_action(action)
    return c.finish(p, "build")


def train_dests() -> list[str]:
    return [a.dest for a in train_cli.build_parser()._actions if a.dest not in _TRAIN_OWN]


def _rules(p: argparse.ArgumentParser) -> dict:

    skip = {"help", "config", "debug", "json", "dry_run"}
    return {
        a.dest: (BOOL if isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)) else a.type)
        for a in p._actions
        if a.dest not in skip and a.option_strings
    }


def parse(argv) -> tuple[argparse.Namespace, dict]:
    """The flags, the config file's values under them; (namespace, the resolved settings)."""
    from ..build.config import read_config

    p = build_parser()
    pre = cli_common.parser("build", add_help=False)
    pre.add_argument("--config", type=_CONFIG)
    known, _ = pre.parse_known_args(argv)
    rules = _rules(p)
    if known.config:
        values = read_config(known.config, rules)
        for a in p._actions:
            if a.dest in values and a.choices is not None and values[a.dest] not in a.choices:
                from ..boundary import BadInput

                raise BadInput(
                    f"--config {known.config}",
                    f"{a.dest.replace('_', '-')}: {values[a.dest]!r} is not one of {', '.join(map(str, a.choices))}",
                )
        p.set_defaults(**values)
    a = p.parse_args(argv)
    # the settings; --from says what to redo, not how anything is built
    resolved = {k: getattr(a, k) for k in rules if k != "from_stage" and getattr(a, k, None) not in (None, False)}
    return a, resolved


def options(a: argparse.Namespace):

    fields = {
        k: getattr(a, k)
        for k in (
            "out",
            "target",
            "data",
            "dump_dir",
            "url",
            "preset",
            "port",
            "server_wait_s",
            "generate",
            "max_new_tokens",
            "temperature",
            "concurrency",
            "limit",
            "trust_remote_code",
            "timeout",
            "wait_s",
            "export_workers",
            "gpus",
            "spec_steps",
            "eval_samples",
            "eval_dtype",
            "serve_preset",
            "from_stage",
            "quiet",
        )
    }
    train = {k: getattr(a, k) for k in train_dests() if k in _train_fields()}
    return BuildOptions(**fields, train=train, say=lambda m: print(f"build: {m}", file=sys.stderr, flush=True))


def _train_fields() -> set:
    import dataclasses

    return {f.name for f in dataclasses.fields(TrainOptions) if f.metadata.get("cli", True)}


def _train_plan(o, a):
    """train's dry-run plan for this build's training (on --gpus ranks)."""

    def plan(fields: dict) -> dict:
        from ..training import TrainOptions, train_draft

        opts = TrainOptions(
            **{
                **fields,
                "data": None,
                "target": o.target,
                "out": None,
                "dry_run": True,
                "world_size": fields.get("world_size") or o.gpus,
            }
        )
        return train_draft(opts)

    return plan


def main(argv=None) -> int:
    from ..build.run import Run, build

    a, resolved = parse(argv)
    if not a.out and not a.dry_run:
        raise cli_common.CliError("--out is required: the folder every stage writes into")
    cli_common.check_json_dest(a.json)
    o = options(a)
    if a.dry_run:
        from ..build.plan import build_plan, plan_lines

        (o if o.out else _with_out(o)).check()  # the inputs a run would refuse, refused by the plan too
        try:
            rep = build_plan(o if o.out else _with_out(o), _train_plan(o, a))
        except TrainDraftError as e:
            raise cli_common.CliError(str(e)) from None
        return cli_common.report(a.json, rep, "\n".join(plan_lines(rep)))
    run = Run(o=o, out=None, redo=set(), say=o.say, load_tokenizer=cli_common.load_tokenizer)
    stop = None
    try:
        with interruptible("build") as stop, library_output(a.verbose, bars=True):
            rep = build(o, run, config_text=dump_config(resolved))
    except (Exception, KeyboardInterrupt) as e:
        if (stop and stop.received) or isinstance(e, KeyboardInterrupt):
            print(
                interrupted_line(
                    "build",
                    f"during stage {run.current or '(between stages)'}; run the same "
                    f"command again to resume (finished stages are kept)",
                ),
                file=sys.stderr,
            )
            return cli_common.EXIT_INTERRUPTED
        raise

    return cli_common.report(a.json, rep, render_text(rep))


def _with_out(o):
    import dataclasses

    return dataclasses.replace(o, out="(--out)")


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("build", main))
