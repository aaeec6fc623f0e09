"""The argument parsers of every tool: the shared prog name and help formatter,
no abbreviated flags, a group's help when its subcommand is missing, one-line usage errors with `did you mean`,
and the flags every tool spells alike (`--json [PATH]`, `--quiet`/`--verbose`; `--sglang VERSION`: options/values.py)
with their argparse types."""

from __future__ import annotations

import argparse
import sys

from .. import envs
from ..options.parser import near_miss
from ..options.values import json_dest
from .naming import prog

_EXIT_USAGE = 2  # common.EXIT_BAD_INPUT: a usage error is bad input


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks; appends '(default: X)' to every option that has a default."""

    def _get_help_string(self, action):
        h = action.help or ""
        if (
            action.default not in (None, argparse.SUPPRESS, [], (), "")
            and "%(default)" not in h
            and "default" not in h
            and action.option_strings
            and not isinstance(action.default, bool)
        ):
            h += " (default: %(default)s)"
        return h


class CliParser(argparse.ArgumentParser):
    """argparse under the package's rules (finish() gives every tool's parser and sub-parser this class): a flag
    is spelled out (allow_abbrev=False: `--dry-ru` is no `--dry-run`); a group called without its subcommand
    prints its help; a usage error is one line `PROG: error: MSG`, with `did you mean` for a mistyped flag."""

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)  # error() looks for a mistyped flag in it
        ns, extras = super().parse_known_args(args, namespace)
        for a in self._actions:
            if (
                isinstance(a, argparse._SubParsersAction)
                and a.dest != argparse.SUPPRESS
                and getattr(ns, a.dest, None) is None
            ):
                self.print_help(sys.stderr)
                self.exit(_EXIT_USAGE)
        return ns, extras

    def error(self, message):
        hint = near_miss(self, getattr(self, "_argv", []), message)
        self.exit(_EXIT_USAGE, f"{self.prog}: error: {message}{hint} (`{self.prog} --help` lists the options)\n")


def parser(tool: str, description: str | None = None, **kw) -> CliParser:
    """A tool's parser: its prog name, no abbreviations, help that shows defaults (finish() adds --debug)."""
    return CliParser(prog=prog(tool), description=description, formatter_class=HelpFormatter, allow_abbrev=False, **kw)


def doc_description(doc: str, paragraphs: int = 1) -> str:
    """A module docstring's first `paragraphs` paragraphs (after a usage line) as a --help description: whole
    paragraphs, never a line cut out of one."""
    paras = [p.strip("\n") for p in doc.strip().split("\n\n")]
    if "\n" not in paras[0] and paras[0].lstrip("`").startswith(("python -m", "sglang-eagle3")) and len(paras) > 1:
        paras = paras[1:]
    return "\n\n".join(paras[:paragraphs])


def finish(parser: argparse.ArgumentParser, tool: str) -> argparse.ArgumentParser:
    """Give a tool's parser (and its sub-parsers) the shared prog name, help formatter, --debug flag and rules
    (CliParser: no abbreviations, group help, one-line usage errors)."""
    old, new = parser.prog, prog(tool)
    todo = [parser]
    while todo:
        p = todo.pop()
        p.prog = new + p.prog[len(old) :] if p.prog.startswith(old) else p.prog
        p.formatter_class = HelpFormatter
        p.allow_abbrev = False
        if type(p) is argparse.ArgumentParser:
            p.__class__ = CliParser
        if "--debug" not in p._option_string_actions:
            p.add_argument(
                "--debug", action="store_true", help=f"show the full traceback of an error (also {envs.DEBUG}=1)"
            )
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                a.required = False  # CliParser prints the group's help instead of "required: cmd"
                todo += list(a.choices.values())
    return parser


def add_json_out(parser, what: str = "the results") -> None:
    """`--json [PATH]`: the same flag in every tool; no PATH or '-' prints JSON on stdout."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        type=json_dest,
        metavar="PATH",
        help=f"write {what} as JSON to PATH ('-' or no PATH: print JSON instead of text)",
    )


def add_verbosity(parser, quiet: str = "no progress output", verbose: str | None = None) -> None:
    """`--quiet` / `--verbose` (args.quiet, args.verbose): the default shows progress and this package's own
    lines; --verbose adds what the libraries underneath log."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--quiet", action="store_true", help=quiet)
    g.add_argument(
        "--verbose", action="store_true", help=verbose or "also show the logs and warnings of the libraries underneath"
    )
