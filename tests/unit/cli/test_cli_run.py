"""The one runner of the report commands (cli/run.py): a refusal is one line and its code, --json is checked
before the work and written after it, a verdict may refuse after the report, an interrupt is one line and 130;
and the options types of the commands that use it read their flags back (aliases with an action of their own)."""

from __future__ import annotations

import json
import signal

import pytest
from cli_fixtures import parsers  # noqa: F401  (fixture)

from sglang_eagle3_ext.boundary import BadInput, Refused
from sglang_eagle3_ext.cli.run import json_in_existing_folder, run_command
from sglang_eagle3_ext.compat.options import PatchesOptions
from sglang_eagle3_ext.draft.options import CheckOptions, ConvertOptions
from sglang_eagle3_ext.dump.run_options import StatusOptions
from sglang_eagle3_ext.options.parser import options_from
from sglang_eagle3_ext.tiny.options import TinyOptions


class Odd(RuntimeError):  # a feature's own error
    pass


def _run(capsys, **kw):
    kw.setdefault("render", lambda rep: f"text {rep['n']}")
    code = run_command("eval", kw.pop("call", lambda: {"n": 1}), kw.pop("render"), **kw)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_report_is_the_text_or_the_json(tmp_path, capsys):
    assert _run(capsys) == (0, "text 1\n", "")
    code, out, err = _run(capsys, json="-")
    assert (code, json.loads(out), err) == (0, {"n": 1}, "")
    code, out, err = _run(capsys, json="-", text_beside_json=True, verdict=lambda rep: 1)
    assert (code, json.loads(out), err) == (1, {"n": 1}, "text 1\n")
    dest = tmp_path / "r.json"
    assert _run(capsys, json=str(dest), as_json=lambda rep: {"m": rep["n"]}) == (0, "text 1\n", "")
    assert json.loads(dest.read_text()) == {"m": 1}


@pytest.mark.parametrize(
    "error, code",
    [(Refused("--x 1: too small; give 2", code=1), 1), (BadInput("--x 1", "too\nsmall"), 2), (Odd("odd: no"), 2)],
)
def test_a_refusal_is_one_line_and_its_code(capsys, error, code):
    def call():
        raise error

    got, out, err = _run(capsys, call=call, errors=(Odd,))
    assert (got, out) == (code, "")
    assert err.count("\n") == 1 and err.startswith("python -m sglang_eagle3_ext.cli.eval: error: ")


def test_an_error_of_no_refusal_kind_is_left_to_the_tool(capsys):
    def call():
        raise Odd("a bug")

    with pytest.raises(Odd):
        _run(capsys, call=call)


def test_a_verdict_refuses_after_the_report(capsys):
    def verdict(rep):
        raise Refused(f"figure {rep['n']} implausible")

    code, out, err = _run(capsys, verdict=verdict)
    assert (code, out) == (2, "text 1\n") and err.endswith("error: figure 1 implausible\n")


def test_json_is_checked_before_the_call_and_never_by_the_refusal_hook(tmp_path, capsys):
    called, hooked = [], []
    dest = tmp_path / "no" / "r.json"
    code, out, err = _run(
        capsys,
        call=lambda: called.append(1),
        json=str(dest),
        json_check=json_in_existing_folder,
        refused=lambda e: hooked.append(e) or "hooked",
    )
    assert (code, out, called, hooked) == (2, "", [], [])
    assert err.endswith(f"error: --json {dest}: no folder {dest.parent}; create it or give another path\n")
    code, out, err = _run(capsys, call=lambda: {"n": 2}, json=str(dest))  # a folder the command may make
    assert (code, json.loads(dest.read_text())) == (0, {"n": 2})


def test_the_refusal_hook_says_the_line(capsys):
    def call():
        raise Refused("first\nsecond")

    code, out, err = _run(capsys, call=call, refused=lambda e: str(e).upper())
    assert code == 2 and err == "python -m sglang_eagle3_ext.cli.eval: error: FIRST\nSECOND\n"


def test_an_interrupt_is_one_line_and_130(capsys):
    def call():
        signal.raise_signal(signal.SIGINT)

    with pytest.raises(SystemExit) as e:
        _run(capsys, call=call, stopped="nothing was written")
    assert e.value.code == 130
    assert capsys.readouterr().err == "python -m sglang_eagle3_ext.cli.eval: interrupted; nothing was written\n"


def test_an_alias_with_an_action_of_its_own_keeps_the_flags_default(parsers):
    """check's --headers-only (store_false) keeps --scan-values, the opposite switch, out of --help."""
    p = parsers["check"]

    def scan(*argv):
        return options_from(p.parse_args(["d", *argv]), CheckOptions).scan_values

    assert (scan(), scan("--headers-only"), scan("--no-scan-values"), scan("--scan-values")) == (
        True,
        False,
        False,
        True,
    )
    assert scan("--headers-only", "--scan-values") is True
    assert "--scan-values" not in p.format_help() and "--no-scan-values" not in p.format_help()


@pytest.mark.parametrize(
    "command, argv, want",
    [
        ("check", ["d", "--headers-only"], CheckOptions(draft="d", scan_values=False)),
        (
            "convert",
            ["s", "t", "--hf-indices", "3,31", "--force"],
            ConvertOptions(src="s", dst="t", hf_indices=[3, 31], force=True),
        ),
        ("tiny", ["--seed", "3", "--samples", "5"], TinyOptions(seed=3, samples=5)),
        ("patches", ["--print", "0.5.16"], PatchesOptions(print_release="0.5.16")),
        ("dump status", ["--dump-dir", "s"], StatusOptions(dump_dir="s")),
    ],
)
def test_the_converted_commands_read_back_into_their_options(parsers, tmp_path, monkeypatch, command, argv, want):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s").mkdir()
    tool, _, sub = command.partition(" ")
    ns = parsers[tool].parse_args([*([sub] if sub else []), *argv])
    assert options_from(ns, type(want)) == want
