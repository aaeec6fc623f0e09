"""`build` on bad input: exit 2 with one line naming the input, for the prompts file, the dump, the target and
the config file, the same for a run and for `--dry-run`, and no hang on a FIFO or a device. Each case runs
under an alarm, so a hang fails the test instead of stopping the suite."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.boundary import BadInput, Refused
from sglang_eagle3_ext.cli import build as build_cli
from sglang_eagle3_ext.cli.common import run_tool

TARGET_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "vocab_size": 256,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}


@pytest.fixture
def world(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(TARGET_CONFIG))
    (tmp_path / "prompts.jsonl").write_text('{"id": "a", "input_ids": [1, 2, 3]}\n')
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dump").mkdir()
    return tmp_path


class Hang(BaseException):
    """Raised by the alarm: no handler of the command line catches it."""


def cli(world: Path, argv: list, capsys, timeout: int = 30) -> tuple[int, list[str]]:
    """`build ARGV` in `world`, stopped at `timeout` seconds: (exit code, stderr lines)."""

    def alarm(signum, frame):
        raise Hang

    old_dir, old_handler = os.getcwd(), signal.signal(signal.SIGALRM, alarm)
    os.chdir(world)
    signal.alarm(timeout)
    try:
        capsys.readouterr()
        rc = run_tool("build", build_cli.main, [str(a) for a in argv])
    except Hang:
        pytest.fail(f"build {' '.join(map(str, argv))} still ran after {timeout} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_handler)
        os.chdir(old_dir)
    return rc, capsys.readouterr().err.strip().splitlines()


# (flags, what the one line must name): each is refused by a run and by --dry-run alike
URL = ["--url", "http://127.0.0.1:9"]
BAD = [
    (["--data", "fifo", *URL], ["--data", "fifo", "FIFO"]),
    (["--data", "/dev/null", *URL], ["--data", "/dev/null", "regular file"]),
    (["--data", "nowhere.jsonl", *URL], ["--data", "nowhere.jsonl"]),
    (["--data", ".", *URL], ["--data", "."]),
    (["--data", "prompts.jsonl", *URL, "--preset", "tiny-dump"], ["--url", "--preset"]),
    (["--data", "prompts.jsonl"], ["--url", "--preset"]),
    (["--dump-dir", "nowhere"], ["--dump-dir", "nowhere"]),
    (["--dump-dir", "fifo"], ["--dump-dir", "fifo"]),
    (["--dump-dir", "prompts.jsonl"], ["--dump-dir", "prompts.jsonl"]),
    (["--dump-dir", "dump"], ["--dump-dir", "dump", "not a dump"]),  # a folder, not a dump
    (["--dump-dir", "dump", *URL], ["--dump-dir", "--url"]),
    (["--data", "prompts.jsonl", *URL, "--port", "70000"], ["--port", "70000"]),
    (["--data", "prompts.jsonl", *URL, "--init-from", "nowhere"], ["--init-from", "nowhere"]),
]


@pytest.mark.parametrize("flags,names", BAD, ids=[" ".join(f) for f, _ in BAD])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_bad_input_is_one_line_exit_2_and_no_hang(world, capsys, flags, names, dry_run):
    argv = ["--target", "target", "--out", "out", *flags, *(["--dry-run"] if dry_run else [])]
    rc, err = cli(world, argv, capsys)
    assert rc == 2, err
    assert len(err) == 1 and all(n in err[0] for n in names), err


@pytest.mark.parametrize(
    "target,names",
    [("nowhere", ["--target", "nowhere"]), ("fifo", ["--target", "fifo"]), ("prompts.jsonl", ["--target"])],
)
def test_a_target_that_is_not_a_model_folder_is_one_line_exit_2(world, capsys, target, names):
    for dry in ([], ["--dry-run"]):
        rc, err = cli(world, ["--target", target, "--out", "out", "--dump-dir", "dump", *dry], capsys)
        assert rc == 2 and len(err) == 1 and all(n in err[0] for n in names), err


def test_a_fifo_or_device_as_config_json_or_config_file_is_refused_by_name(world, capsys):
    (world / "t2").mkdir()
    os.mkfifo(world / "t2" / "config.json")
    rc, err = cli(world, ["--target", "t2", "--out", "out", "--data", "prompts.jsonl", *URL, "--dry-run"], capsys)
    assert rc == 2 and len(err) == 1 and "t2" in err[0] and "config.json" in err[0] and "FIFO" in err[0], err
    for cfg in ("fifo", "/dev/zero"):
        rc, err = cli(world, ["--config", cfg, "--target", "target", "--out", "out", "--dry-run"], capsys)
        assert rc == 2 and len(err) == 1 and "--config" in err[0] and cfg in err[0], err
        assert ("FIFO" if cfg == "fifo" else "regular file") in err[0], err


# config file texts each refused naming the key (or the file) in one line
BAD_CONFIGS = [
    ("port: 70000\n", ["port", "70000"]),
    ("lr: .nan\n", ["lr", "nan"]),
    ("steps: 0\n", ["steps"]),
    ("eval-dtype: fp8\n", ["eval-dtype", "fp8"]),
    ("from-stage: later\n", ["from-stage", "later"]),
    ("data: fifo\nurl: http://127.0.0.1:9\n", ["data", "fifo"]),
    ("dump-dir: nowhere\n", ["dump-dir", "nowhere"]),
    ("- 1\n", ["--config", "mapping"]),
    ("[" * 2000 + "\n", ["--config"]),
    ("\xff\xfe\n", ["--config", "UTF-8"]),
]


@pytest.mark.parametrize("text,names", BAD_CONFIGS, ids=[t[:20] for t, _ in BAD_CONFIGS])
def test_a_bad_config_file_is_one_line_exit_2_for_a_run_and_a_plan(world, capsys, text, names):
    (world / "c.yaml").write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else b"\xff\xfe\n")
    for dry in ([], ["--dry-run"]):
        rc, err = cli(world, ["--config", "c.yaml", "--target", "target", "--out", "out", *dry], capsys)
        assert rc == 2 and len(err) == 1 and all(n in err[0] for n in names), (text, err)


# a YAML mapping of build's flags with values of every kind: read or refused as BadInput, never anything else
_KEYS = ["lr", "port", "steps", "spec-steps", "generate", "data", "eval-dtype", "layer-ids", "temperature", "limit"]
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 100), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4))
def test_any_config_mapping_is_read_or_refused_naming_the_file(tmp_path, values):
    import yaml

    cfg = tmp_path / "any.yaml"
    cfg.write_text(yaml.safe_dump(values))
    try:
        a, resolved = build_cli.parse(["--config", str(cfg), "--out", "o"])
    except (BadInput, Refused) as e:
        assert str(cfg) in str(e) and "\n" not in str(e)
        return
    except SystemExit as e:  # argparse's own refusal of a value the file set: exit 2
        assert e.code == 2
        return
    for key, value in values.items():  # a value the file set passed its flag's rule
        dest = key.replace("-", "_")
        got = getattr(a, dest)
        if value is None:  # null: the flag's default
            assert got == build_cli.build_parser().get_default(dest), (key, got)
        if isinstance(got, float):
            assert got == got and abs(got) != float("inf"), (key, got)
