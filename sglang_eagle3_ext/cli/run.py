"""How a command runs the library and reports: one runner for every command whose `main` is parse, call, report.

    return run_command("swap", lambda: swap(opts), render, json=a.json, verbose=a.verbose)

`--json PATH` is checked before the call (a report that cannot be written is found before the work); the call
runs under the command's output rules (cli/output.py) and, with `stopped`, under `interrupted_exits`; a
refusal (`boundary.Refused`/`BadInput`, or one of `errors`, the feature's own) is one line `PROG: error: ...`
(none when it says `echo = False`: another process says it) and its code (2 unless it carries another, as
`code` or `exit_code`); the report is JSON (--json) and the text, unless JSON took stdout;
`verdict(rep)` gives the exit code (0 without one) and may refuse in turn, after the report.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

from ..boundary import BadInput, Refused
from ..interrupts import EXIT_INTERRUPTED, interruptible
from ..json_file import check_json_dest, write_json
from ..options.parser import add_options
from .args import add_json_out, add_verbosity, doc_description, parser
from .common import EXIT_BAD_INPUT, EXIT_OK, error_line
from .naming import prog
from .output import library_output


def one_line(e: BaseException) -> str:
    return str(e).replace("\n", " ")


def json_in_existing_folder(dest: str | None) -> None:
    """`--json PATH` whose folder must exist already (the command makes no folder of its own)."""
    check_json_dest(dest, made=False)


def options_parser(tool: str, doc: str, options_type, paragraphs: int = 1):
    """A report command's parser: `doc`'s first paragraphs, every flag of `options_type`, then --json (the report)
    and --quiet/--verbose; `finish` gives it --debug and the shared rules."""
    p = parser(tool, doc_description(doc, paragraphs=paragraphs))
    add_options(p, options_type)
    add_json_out(p, "the report")
    add_verbosity(p, quiet="no progress lines")
    return p


def progress_lines(tool: str, a) -> Callable[[str], None] | None:
    """The command's progress lines (`TOOL: ...` on stderr), none with --quiet or when JSON takes stdout."""
    return None if a.quiet or a.json == "-" else (lambda m: print(f"{tool}: {m}", file=sys.stderr, flush=True))


def run_command(
    tool: str,
    call: Callable[[], Any],
    render: Callable[[Any], str] | None = None,
    *,
    json: str | None = None,
    stopped: str | Callable[[], str | None] | None = None,
    verbose: bool | None = None,
    bars: bool = False,
    errors: tuple[type[BaseException], ...] = (),
    refused: Callable[[BaseException], str] = one_line,
    as_json: Callable[[Any], Any] | None = lambda rep: rep,
    verdict: Callable[[Any], int | None] | None = None,
    json_check: Callable[[str | None], None] | None = check_json_dest,
    text_beside_json: bool = False,
) -> int:
    """Run `call()` as command `tool` and report its result; the exit code.

    stopped: what an interrupt leaves (its line: `PROG: interrupted; STOPPED`, exit 130), or a function giving it
    then (None: no line, another process says it); None: no interrupt handling of its own. verbose: None leaves
    the output as the command set it, else cli/output.py's rules. refused(e): the message of a refusal of the
    call (e.g. a JSON report of it written too). as_json: the JSON of the result (None: the library wrote it).
    json_check: None where the command checks --json itself. text_beside_json: the text goes to stderr when JSON
    takes stdout."""
    said = one_line  # a refusal of --json itself is never the call's
    try:
        if json_check is not None:
            json_check(json)
        said = refused
        stops = interrupted_exits(tool, stopped) if stopped else contextlib.nullcontext()
        with stops, library_output(verbose, bars) if verbose is not None else contextlib.nullcontext():
            rep = call()
        if json and as_json is not None:
            write_json(json, as_json(rep))
        if render is not None and (json != "-" or text_beside_json):
            print(render(rep), file=sys.stderr if json == "-" else sys.stdout)
        code = verdict(rep) if verdict else None
    except (Refused, BadInput, *errors) as e:
        if getattr(e, "echo", True):
            print(error_line(tool, said(e)), file=sys.stderr)
        return getattr(e, "code", getattr(e, "exit_code", EXIT_BAD_INPUT))
    return EXIT_OK if code is None else code


@contextlib.contextmanager
def interrupted_exits(tool: str, what):
    """`interruptible` for a command with nothing of its own to say: an interrupt, whatever the library made of
    it, prints `PROG: interrupted; WHAT` and exits 130; `what` may be a function giving the text then (None: no
    line, another process says it)."""
    stop = None
    try:
        with interruptible(prog(tool)) as stop:
            yield stop
    except (Exception, KeyboardInterrupt) as e:
        if not (isinstance(e, KeyboardInterrupt) or (stop and stop.received)):
            raise
        said = what() if callable(what) else what
        if said is not None:
            print(f"{prog(tool)}: interrupted; {said}", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
