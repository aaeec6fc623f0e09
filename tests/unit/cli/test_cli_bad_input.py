"""Bad local input is refused first, fast and named right, by every command: a path that is missing or of the
wrong kind (a folder where a file goes and the reverse, a FIFO, a device), a number out of range, a mistyped
flag or preset. Each case runs the real command line in a process of its own, from an empty working folder:
exit 2, one line on stderr naming the flag as typed and the fix, nothing made (in the working folder, --out or
the folders named), and nothing heavy imported (`-X importtime`: a count of modules, which a loaded machine
does not change, where seconds would)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from cli_fixtures import parsers  # noqa: F401  (fixture)

from sglang_eagle3_ext.cli.commands import COMMANDS
from sglang_eagle3_ext.compat.server_flags import installed_flags, read_flags

HEAVY = {"torch", "sglang", "transformers", "speculators", "safetensors", "numpy", "datasets"}
# seconds for one refusal in a process of its own: ~1 s on an idle machine; the bound leaves room for a loaded
# 2-core CI runner, and is not what the test is about (the import check above is)
SECONDS = 30
FIX = re.compile(r"\b(give|pass|add|run|drop|expected|choose|did you mean|leave)\b")

D, F, P = "{dir}", "{file}", "{fifo}"  # an empty folder, a JSONL file, a FIFO
NO, OUT, HS = "{tmp}/missing", "{tmp}/out", "{hs}"  # nothing there; a folder to be made; hidden-state files
T = ["--target", D]

# (command line, the flag (or positional's path) the one line must name, a word the fix must hold)
CASES = {
    "launch config missing": (["launch", "--config", NO], "--config", "no such file"),
    "launch topology fifo": (["launch", "--topology-file", P], "--topology-file", "FIFO"),
    "launch topology device": (["launch", "--topology-file", "/dev/null"], "--topology-file", "device"),
    "launch preset typo": (["launch", "--preset", "tiny-dmp", "--model-path", "m"], "--preset", "tiny-dump"),
    "launch flag typo": (["launch", "--model-path", "m", "--dry-runn"], "--dry-runn", "--dry-run"),
    "launch sglang flag typo": (["launch", "--model-pth", "m"], "--model-pth", "--model-path"),
    "launch port": (["launch", "--model-path", "m", "--port", "99999"], "--port", "65535"),
    "launch dump-dir file": (["launch", "--preset", "tiny-dump", "--dump-dir", F], "--dump-dir", "not a folder"),
    "dump run data folder": (["dump", "run", "--data", D, "--dump-dir", D], "--data", "--dump-dir"),
    "dump run dump-dir missing": (["dump", "run", "--data", F, "--dump-dir", NO], "--dump-dir", "no such folder"),
    "dump run url port": (["dump", "run", "--data", F, "--dump-dir", D, "--url", "http://h:99999"], "--url", "65535"),
    "dump export dump-dir file": (
        ["dump", "export", "--dump-dir", F, "--to", "speculators", "--out", OUT],
        "--dump-dir",
        "dump run --data",
    ),
    "dump export out file": (["dump", "export", "--dump-dir", D, "--to", "speculators", "--out", F], "--out", ""),
    "dump status fifo": (["dump", "status", "--dump-dir", P], "--dump-dir", "FIFO"),
    "convert src missing": (["convert", NO, OUT], NO, "no such folder"),
    "convert src file": (["convert", F, OUT], F, "not a folder"),
    "convert dst file": (["convert", D, F], F, "not a folder"),
    "check target file": (["check", D, "--target", F], "--target", "folder"),
    "check json folder": (["check", D, "--json", D], "--json", "is a folder"),
    "bench prompts folder": (["bench", "--url", "http://127.0.0.1:9", "--prompts", D], "--prompts", "folder"),
    "bench log missing": (["bench", "--url", "http://127.0.0.1:9", "--spec-log", NO], "--spec-log", "no such"),
    "bench concurrency": (["bench", "--url", "http://127.0.0.1:9", "--concurrency", "0"], "--concurrency", ""),
    "bench url": (["bench", "--url", "localhost:30000"], "--url", "http"),
    "train data prompts file": (["train", "--data", F, *T, "--out", OUT], "--data", "dump export"),
    "train data missing": (["train", "--data", NO, *T, "--out", OUT], "--data", "no such folder"),
    "train data not exported": (["train", "--data", D, *T, "--out", OUT], "--data", "dump export"),
    "train target file": (["train", "--data", HS, "--target", F, "--out", OUT], "--target", "folder"),
    "train out file": (["train", "--data", HS, *T, "--out", F], "--out", "not a folder"),
    "train min-val-acc": (["train", "--data", HS, *T, "--out", OUT, "--min-val-acc", "2"], "--min-val-acc", ""),
    "compat source file": (["compat", "--source", F], "--source", "not a folder"),
    "compat wheel fifo": (["compat", "--wheel", P], "--wheel", "FIFO"),
    "compat wheel-dir missing": (["compat", "--wheel-dir", NO], "--wheel-dir", "no such folder"),
    "tiny prompts missing": (["tiny", OUT, "--sample-dump", "{tmp}/sd", "--prompts", NO], "--prompts", "JSONL"),
    "tiny prompts folder": (["tiny", OUT, "--sample-dump", "{tmp}/sd", "--prompts", D], "--prompts", "JSONL"),
    "tiny prompts text": (["tiny", OUT, "--sample-dump", "{tmp}/sd", "--prompts", "{text}"], "--prompts", "token"),
    "tiny prompts alone": (["tiny", OUT, "--prompts", F], "--prompts", "--sample-dump"),
    "tiny out file": (["tiny", F], F, "not a folder"),
    "tiny samples": (["tiny", OUT, "--sample-dump", "{tmp}/sd", "--samples", "0"], "--samples", ""),
    "patches release": (["patches", "--print", "0.0.1"], "--print", "0.5"),
    "eval draft file": (["eval", "--draft", F, "--data", D], "--draft", "folder"),
    "eval data prompts file": (["eval", "--draft", D, "--data", F], "--data", "prompts"),
    "eval steps": (["eval", "--draft", D, "--data", D, "--steps", "99"], "--steps", ""),
    "eval device": (["eval", "--draft", D, "--data", D, "--device", "gpu"], "--device", "cuda"),
    "eval url": (["eval", "--draft", D, "--data", D, "--url", "127.0.0.1:30000"], "--url", "http"),
    "swap url": (["swap", "--url", "ftp://h", "--draft", D], "--url", "http"),
    "swap draft missing": (["swap", "--url", "http://127.0.0.1:9", "--draft", NO], "--draft", "no-local-check"),
    "swap timeout": (["swap", "--url", "http://127.0.0.1:9", "--draft", D, "--timeout", "0"], "--timeout", ""),
    "refresh dump-dir file": (["refresh", "--dump-dir", F, "--draft", D, "--out", OUT], "--dump-dir", "folder"),
    "refresh draft missing": (["refresh", "--dump-dir", D, "--draft", NO, "--out", OUT], "--draft", "no such"),
    "refresh out file": (["refresh", "--dump-dir", D, "--draft", D, "--out", F], "--out", "not a folder"),
    "refresh swap url": (["refresh", "--dump-dir", D, "--draft", D, "--out", OUT, "--swap", "h:1"], "--swap", "http"),
    "build data folder": (["build", "--data", D, *T, "--out", OUT], "--data", "--dump-dir"),
    "build dump-dir file": (["build", "--dump-dir", F, *T, "--out", OUT], "--dump-dir", "--data"),
    "build config fifo": (["build", "--config", P, "--out", OUT], "--config", "FIFO"),
    "build port": (["build", "--data", F, *T, "--out", OUT, "--preset", "tiny-dump", "--port", "0"], "--port", ""),
    "build preset": (["build", "--data", F, *T, "--out", OUT, "--preset", "nonesuch"], "--preset", "available"),
    "tune data prompts file": (["tune", *T, "--draft", D, "--data", F, "--out", OUT], "--data", "--prompts"),
    "tune target missing": (["tune", "--target", NO, "--draft", D, "--data", D, "--out", OUT], "--target", "no such"),
    "tune timings folder": (
        ["tune", *T, "--draft", D, "--data", D, "--out", OUT, "--timings", D],
        "--timings",
        "timings.json",
    ),
    "tune out file": (["tune", *T, "--draft", D, "--data", D, "--out", F], "--out", "not a folder"),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The paths the cases name, made once: an empty folder, a JSONL prompts file, a FIFO, a prompts file of
    text (the tiny target takes token ids only), a folder of hidden-state files (by name)."""
    root = tmp_path_factory.mktemp("bad_input")
    (root / "dir").mkdir()
    (root / "prompts.jsonl").write_text('{"id": "a", "input_ids": [1, 2, 3]}\n')
    (root / "text.jsonl").write_text('{"id": "a", "text": "hello"}\n')
    os.mkfifo(root / "fifo")
    (root / "hs").mkdir()
    (root / "hs" / "hs_0.safetensors").write_bytes(b"")
    return {
        "{dir}": root / "dir",
        "{file}": root / "prompts.jsonl",
        "{fifo}": root / "fifo",
        "{text}": root / "text.jsonl",
        "{hs}": root / "hs",
    }


def _fill(word: str, inputs: dict, tmp) -> str:
    """A case's word with its paths: the made inputs, and under `{tmp}` this case's own folder."""
    return str(inputs.get(word, word)).replace("{tmp}", str(tmp))


def _snapshot(root) -> set:
    return {os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files}


def test_every_command_has_cases():
    assert {c.name for c in COMMANDS} == {argv[0] for argv, _, _ in CASES.values()}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_first_in_one_line(case, inputs, tmp_path):
    argv, flag, fix = CASES[case]
    work = tmp_path / "cwd"
    work.mkdir()
    argv = [_fill(w, inputs, tmp_path) for w in argv]
    flag = _fill(flag, inputs, tmp_path)
    made = inputs["{dir}"].parent
    before = _snapshot(made)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sglang_eagle3_ext", *argv],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    took = time.monotonic() - t0
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")]
    said = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("import time:")]
    assert proc.returncode == 2, (case, proc.returncode, said)
    assert len(said) == 1 and not proc.stdout.strip(), said + [proc.stdout]
    line = said[0]
    assert line.startswith(f"sglang-eagle3 {argv[0]}") and ": error: " in line, line
    assert f"{flag}" in line and fix in line and FIX.search(line), (flag, fix, line)
    heavy = sorted({m.split(".")[0] for m in imported} & HEAVY)
    assert not heavy, f"{case}: imported {heavy} before refusing"
    assert sorted(os.listdir(tmp_path)) == ["cwd"] and not os.listdir(work), _snapshot(tmp_path)
    assert _snapshot(made) == before, sorted(_snapshot(made) ^ before)
    assert took < SECONDS, took


def test_help_shows_defaults_as_typed(parsers):
    """Every default in --help reads as a value the user would type (1,4,16,32, 64:1024), never a Python repr."""
    repr_default = re.compile(r"\(default: ?(\(|\[|\{|None\b|'|\))")
    for tool, parser in parsers.items():
        text = " ".join(parser.format_help().split())
        assert not repr_default.search(text), f"{tool}: {repr_default.search(text).group(0)} in --help"


def test_a_file_that_is_no_server_args_gives_no_flags(tmp_path):
    """launch then asks SGLang's own parser (slow, exact) rather than judge flags on a partial list."""
    (tmp_path / "server_args.py").write_text('p.add_argument("--port")\n')
    assert read_flags(tmp_path / "server_args.py") is None
    assert read_flags(tmp_path / "absent.py") is None


@pytest.mark.sglang
def test_sglangs_flags_read_statically_are_its_parsers():
    """The flags launch reads from SGLang's source are exactly those of SGLang's own parser."""
    from sglang_eagle3_ext.launch.presets import sglang_parser

    assert installed_flags() == set(sglang_parser()._option_string_actions)
