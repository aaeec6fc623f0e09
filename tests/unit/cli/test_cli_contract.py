"""Every command keeps the README's contract: exit codes (0 ok, 1 negative verdict, 2 bad input naming the fix,
130 interrupted), one-line errors, local inputs checked before a server is contacted, --json saying what the
text says, and messages in the user's words (flags, not module paths or constants)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from train_world import train_args

from sglang_eagle3_ext import cli


def run(argv, capsys) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---- check ------------------------------------------------------------------------------------------------
def test_check_on_a_file_is_bad_input_in_one_line(tmp_path, capsys):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"not a folder")
    rc, out, err = run(["check", str(f)], capsys)
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert rc == 2, out + err
    assert len(lines) == 1 and "is a file" in lines[0] and str(f) in lines[0], lines


def test_check_json_says_checked_as_the_text_does(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for draft in (str(empty), "org-absent/never-downloaded"):
        rc, text, _ = run(["check", draft], capsys)
        rc_json, out, _ = run(["check", draft, "--json", "-"], capsys)
        rep = json.loads(out)
        said_unchecked = bool(re.search(r"nothing checked|NOT CHECKED", text))
        assert said_unchecked == (not rep["checked"]), (draft, text, rep["checked"])
        assert rc == rc_json == (2 if not rep["checked"] else 1)


def test_check_of_an_absent_hub_id_names_the_installed_download_command(capsys):
    rc, out, err = run(["check", "org-absent/never-downloaded"], capsys)
    assert rc == 2
    assert "hf download org-absent/never-downloaded" in out and "huggingface-cli" not in out + err


# ---- train ------------------------------------------------------------------------------------------------
def test_train_below_min_val_acc_is_a_negative_verdict(tmp_path, monkeypatch, capsys):
    """A draft that did not learn is the run's verdict (exit 1), not bad input: the finished run's real
    refusal (report.require_learned) raised where training ends."""
    from sglang_eagle3_ext.cli import train as cli_train
    from sglang_eagle3_ext.training.report import require_learned

    def trained_but_not_learned(opts):
        require_learned(0.01, opts.min_val_acc, opts.out)

    monkeypatch.setattr(cli_train, "train_draft", trained_but_not_learned)
    (tmp_path / "hs_0.safetensors").touch()  # a folder of hidden states, by name: train's own check passes
    rc, _, err = run(
        ["train", "--data", str(tmp_path), "--target", str(tmp_path), "--out", str(tmp_path / "d")], capsys
    )
    assert rc == 1 and "--min-val-acc" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("made", [False, True])
def test_train_interrupted_says_truly_what_out_holds(tmp_path, made):
    from sglang_eagle3_ext.cli.train import what_out_holds

    out = tmp_path / "draft"
    if made:
        out.mkdir()
        (out / "config.json").write_text("{}")
    text = what_out_holds(str(out))
    assert ("holds" in text and "--resume" in text) if made else ("not written" in text and "--resume" not in text)


@pytest.fixture(scope="module")
def cpu_training_data(tmp_path_factory):
    """The tiny predictable target, a real dump of it made on this CPU (`tiny --sample-dump`) and its export."""
    pytest.importorskip("speculators.train.cli")
    d = tmp_path_factory.mktemp("contract_train")
    assert (
        cli.main(
            [
                "tiny",
                str(d / "target"),
                "--predictable",
                "--sample-dump",
                str(d / "dump"),
                "--samples",
                "12",
                "--max-new-tokens",
                "8",
            ]
        )
        == 0
    )
    assert (
        cli.main(["dump", "export", "--dump-dir", str(d / "dump"), "--to", "speculators", "--out", str(d / "hs")]) == 0
    )
    return {"target": d / "target", "data": d / "hs"}


def test_ctrl_c_in_train_stops_quietly_within_seconds_with_a_true_sentence(cpu_training_data, tmp_path):
    """A terminal's Ctrl-C signals the whole process group, DataLoader workers (spawned, still importing) included:
    the run stops within seconds, exit 130, one line on what --out holds, and no worker's traceback."""
    out = tmp_path / "draft"
    argv = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext",
        "train",
        *train_args(cpu_training_data["data"], cpu_training_data["target"], out),
        "--device",
        "cpu",
        "--epochs",
        "50",
        "--total-seq-len",
        "128",
        "--num-workers",
        "2",
        "--min-val-acc",
        "0",
        "--draft-vocab-size",
        "512",
        "--intermediate-size",
        "256",
    ]
    began = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if "steps/epoch" in line:  # the first epoch's loader workers are starting
            break
    started = time.monotonic() - began
    time.sleep(1.0)
    os.killpg(p.pid, signal.SIGINT)
    sent = time.monotonic()
    try:
        rest = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    took, text = time.monotonic() - sent, "".join(seen) + rest
    assert p.returncode == 130, text[-3000:]
    # the stop (a garbage collection under way, the workers stopped, the interpreter's exit) and the start measured
    # above are CPU work of the same process on the same heap: they slow down together, so half the start (at least
    # 5 s) holds at any load (at load 10 on 2 cores: starts of 60-90 s, stops of 7-19 s)
    assert took < max(5.0, started / 2), (took, started, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    said = [ln for ln in text.splitlines() if "interrupted" in ln]
    assert len(said) == 1 and "train: interrupted;" in said[0], text[-3000:]
    assert ("not written" in said[0]) == (not (out / "config.json").is_file()), said[0]


def test_train_counts_epochs_from_one_in_its_lines_and_bars(cpu_training_data, tmp_path):
    """Epoch 1 is the first in the step and val lines, and in speculators' own progress bar beside them."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_eagle3_ext",
            "train",
            *train_args(cpu_training_data["data"], cpu_training_data["target"], tmp_path / "draft"),
            "--device",
            "cpu",
            "--epochs",
            "2",
            "--log-every",
            "1",
            "--total-seq-len",
            "128",
            "--num-workers",
            "0",
            "--min-val-acc",
            "0",
            "--draft-vocab-size",
            "512",
            "--intermediate-size",
            "256",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = p.stdout + p.stderr
    assert p.returncode == 0, text[-3000:]
    said = {int(n) for n in re.findall(r"\bepoch (\d+)\b", text)}
    shown = {int(n) for n in re.findall(r"\bEpoch (\d+)\b", text)}
    assert said == {1, 2} and re.search(r"\bval epoch 2\b", text), (said, text[-3000:])
    assert shown <= {1, 2}, (shown, text[-3000:])


# ---- launch -----------------------------------------------------------------------------------------------
@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    """launch's start replaced: a call records that SGLang would have been started."""
    from sglang_eagle3_ext.launch import start

    started = []
    monkeypatch.setattr(start, "launch", lambda plan, *checks: started.append(plan))
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return started


def _launch_dry_run(tmp_path, *extra):
    from test_launch_topology import FAKES

    topo = tmp_path / "topo.json"
    topo.write_text(FAKES["nvlink"][0]().to_json())
    return ["launch", "--preset", "tiny", "--dry-run", "--skip-draft-check", "--topology-file", str(topo), *extra]


@pytest.mark.sglang
@pytest.mark.parametrize(
    "abbreviated,full",
    [
        ("--mem-frac", "--mem-fraction-static"),
        ("--disable-radix", "--disable-radix-cache"),
        ("--speculative-num-draft", "--speculative-num-draft-tokens"),
    ],
)
def test_launch_refuses_an_abbreviation_of_sglangs_flags(abbreviated, full, no_launch, tmp_path, capsys):
    rc, out, err = run(_launch_dry_run(tmp_path, f"{abbreviated}=1"), capsys)
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert rc == 2 and not no_launch, out + err
    assert len(lines) == 1 and abbreviated in lines[0] and f"did you mean {full}?" in lines[0], lines


@pytest.mark.sglang
def test_launch_passes_sglangs_flags_spelled_out(no_launch, tmp_path, capsys):
    rc, out, err = run(
        _launch_dry_run(tmp_path, "--mem-fraction-static", "0.4", "--disable-radix-cache", "--tp", "2"), capsys
    )
    assert rc == 0, err
    assert "--mem-fraction-static 0.4" in out and "--disable-radix-cache" in out and "--tp 2" in out, out


def test_launch_help_is_ours_and_says_how_to_see_sglangs():
    """Short and fast (SGLang is not imported for it), naming the flag that prints SGLang's own."""
    code = (
        "import sys, time; from sglang_eagle3_ext import cli; t = time.monotonic(); rc = cli.main(['launch', "
        "'--help']); print(*[m for m in ('sglang', 'torch', 'transformers') if m in sys.modules], "
        "round(time.monotonic() - t, 2), file=sys.stderr); sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "--nccl-profile" in p.stdout and "--help-sglang" in p.stdout, p.stdout
    assert "--mem-fraction-static" not in p.stdout and len(p.stdout.splitlines()) < 80, len(p.stdout.splitlines())
    # fast because nothing heavy is imported (SGLang's import alone takes seconds); 10 s holds at load 8 on 2 cores
    heavy_imported, took = p.stderr.splitlines()[-1].split()[:-1], float(p.stderr.split()[-1])
    assert not heavy_imported and took < 10.0, p.stderr


@pytest.mark.sglang
def test_launch_help_sglang_prints_sglangs_own(capsys):
    rc, out, _ = run(["launch", "--help-sglang"], capsys)
    assert rc == 0 and "--mem-fraction-static" in out and "--speculative-draft-model-path" in out
    assert "--nccl-profile" not in out


# ---- swap -------------------------------------------------------------------------------------------------
def _unreachable_url() -> str:
    import socket

    with socket.socket() as sock:  # a port just freed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("what", ["missing", "not a draft"])
def test_swap_checks_the_local_draft_before_contacting_the_server(what, tmp_path, capsys):
    draft = tmp_path / "draft"
    if what == "not a draft":
        draft.mkdir()
        (draft / "notes.txt").write_text("no model here")
    rc, out, err = run(["swap", "--url", _unreachable_url(), "--draft", str(draft), "--timeout", "5"], capsys)
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert rc == 2 and len(lines) == 1, out + err
    assert str(draft) in lines[0] and "127.0.0.1" not in lines[0], lines[0]


# ---- refresh ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["missing", "not a dump"])
def test_refresh_names_its_dump_dir_once_in_one_line(what, tmp_path, capsys):
    dump = tmp_path / "dump"
    if what == "not a dump":
        dump.mkdir()
    (tmp_path / "draft").mkdir()  # the served draft is there: the dump is what is wrong
    rc, out, err = run(
        ["refresh", "--dump-dir", str(dump), "--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "out")], capsys
    )
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert rc == 2 and len(lines) == 1, out + err
    assert lines[0].count("--dump-dir") == 1 and lines[0].count(str(dump)) == 1, lines[0]


# ---- the README's first screen -----------------------------------------------------------------------------
def test_readme_first_screen_says_who_it_is_for_and_the_two_commands():
    from pathlib import Path

    first = "\n".join((Path(__file__).resolve().parents[3] / "README.md").read_text().splitlines()[:25])
    assert re.search(r"\bFor teams serving DeepSeek-V3-class MoE models\b", first), first
    assert all(w in first for w in ("Kimi-K2.5", "SGLang", "EAGLE-3")), first
    assert "pip install '.[sglang]' && sglang-eagle3 launch --preset tiny-dump" in first, first
    assert "bash .ci/run" in first and re.search(r"about \d+ minutes", first), first


# ---- the user's words -------------------------------------------------------------------------------------
# the package's own module paths and constants, which mean nothing to a user reading --help
INSIDE_WORDS = re.compile(
    r"tiny\.PREDICTABLE|round trip's target|training/\w+\.py|keys\.HF_INDICES_FIELD|"
    r"HAS_MIDLAYER=|tiny/\w+\.py"
)


@pytest.mark.parametrize("command", ["tiny", "train", "convert", "check", "eval", "swap", "refresh", "dump"])
def test_help_speaks_the_users_words(command, capsys):
    assert cli.main([command, "--help"]) == 0
    text = capsys.readouterr().out
    assert text and not INSIDE_WORDS.search(text), INSIDE_WORDS.search(text).group(0)
