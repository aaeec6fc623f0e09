"""The documents work as written: every command of docs/tutorial.md runs (CPU; serving commands as --dry-run,
server-needing ones parsed by the real command line), every `sglang-eagle3` command of the README parses, the
sample prompt files are read by both readers, and no document, comment or test speaks of how the package was
developed (working words) instead of what it does."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import tomllib
from train_world import CPU_TRAIN

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
GPU_MARK = "# gpu"


@dataclass
class Command:
    where: str  # file:line
    text: str  # continuation lines joined
    gpu: bool  # preceded by `# gpu`: needs a GPU server

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)


def bash_commands(path: Path) -> list[Command]:
    """The commands of every ```bash block, in order (comments dropped, `\\` continuations joined)."""
    out, in_block, gpu, pending, start = [], False, False, "", 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            in_block = s == "```bash" and not in_block
            gpu = False
            continue
        if not in_block or (not s and not pending):
            continue
        if not pending and s.startswith("#"):
            gpu = gpu or s == GPU_MARK
            continue
        start = start if pending else n
        pending += " " + s.removesuffix("\\").strip() if pending else s.removesuffix("\\").strip()
        if not s.endswith("\\"):
            out.append(Command(f"{_rel(path)}:{start}", pending.split(" #")[0].strip(), gpu))
            pending, gpu = "", False
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _env_and_argv(argv: list[str]) -> tuple[dict, list[str]]:
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    return env, argv


class _Parsed(BaseException):
    """Raised right after a tool's own parser accepted its flags (a BaseException: no handler turns it into
    an exit code)."""


def parse_only(argv: list[str]) -> argparse.Namespace:
    """The namespace `sglang-eagle3 ARGV` parses to, without running the command; AssertionError with the
    tool's message when its parser refuses the flags. The example paths of a document exist on the reader's
    machine, not here: the flags that name local paths take them as written (every other value is checked)."""
    from sglang_eagle3_ext import cli

    real, value = argparse.ArgumentParser.parse_args, argparse.ArgumentParser._get_value

    def stop(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    def as_written(self, action, text):
        return text if getattr(action.type, "local_path", False) else value(self, action, text)

    with (
        mock.patch.object(argparse.ArgumentParser, "parse_args", stop),
        mock.patch.object(argparse.ArgumentParser, "_get_value", as_written),
    ):
        try:
            rc = cli.main(argv)
        except _Parsed as p:
            return p.args[0]
    raise AssertionError(f"`sglang-eagle3 {shlex.join(argv)}` did not parse (exit {rc})")


def run_cli(argv: list[str], env: dict | None = None) -> int:
    """`sglang-eagle3 ARGV` in this process (the environment restored after)."""
    from sglang_eagle3_ext import cli

    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        return cli.main(list(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _extras() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def check_pip(cmd: Command) -> None:
    """`pip install '.[a,b]'`: not run here (this environment is the install); the extras must exist."""
    for spec in re.findall(r"\[([a-z,]+)\]", cmd.text):
        assert set(spec.split(",")) <= _extras(), f"{cmd.where}: unknown extra in {cmd.text!r}"


# ---- the tutorial ----------------------------------------------------------------------------------------
# What differs on CPU, each for a reason:
#   launch     (GPU server)    run with --dry-run: the plan, the preset checked against SGLang, the draft checked
#   dump run   (needs it)      flags parsed; tiny.sample_dump writes what the server would, for DUMP_LIMIT prompts
#                              with STANDIN_NEW_TOKENS-token answers (greedy decoding on CPU is slow)
#   bench      (two servers)   flags parsed
#   train      (sized for GPU) CPU_TRAIN appended: one step of a smaller draft (its own 512-token vocabulary, so
#                              convert and check also meet a d2t mapping), a real checkpoint in seconds
DUMP_LIMIT, STANDIN_NEW_TOKENS = 8, 4


def preset_layers(preset: str) -> tuple[int, ...]:
    """The HF indices a launch preset dumps (its eagle3_ext.dump_layers)."""
    import yaml

    cfg = yaml.safe_load((REPO / "server_configs" / f"{preset}.yaml").read_text())
    return tuple(int(x) for x in cfg["eagle3_ext"]["dump_layers"])


def _cpu_train(sub: list[str]) -> list[str]:
    """CPU_TRAIN for this train line: a draft of the target's own vocabulary (DFlash) keeps its vocabulary size."""
    if "--draft-arch" in sub and sub[sub.index("--draft-arch") + 1] == "dflash":
        i = CPU_TRAIN.index("--draft-vocab-size")
        return CPU_TRAIN[:i] + CPU_TRAIN[i + 2 :]
    return CPU_TRAIN


def _step(cmd: Command, cwd: Path, home: Path, dump_preset: list[str]) -> str:
    """Run one tutorial command in `cwd`; returns how it ran."""
    env, argv = _env_and_argv(cmd.argv)
    if argv[0] == "pip":
        check_pip(cmd)
        return "checked (extras exist)"
    if argv[0] != "sglang-eagle3":
        p = subprocess.run(
            ["bash", "-c", cmd.text],
            cwd=cwd,
            env={**os.environ, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=300,  # hang protection only: generous for a busy machine
        )
        assert p.returncode == 0, f"{cmd.where}: {cmd.text} -> {p.returncode}\n{p.stderr}"
        return "ran (bash)"
    sub = argv[1:]
    if sub[0] == "launch":
        if "--preset" in sub:
            dump_preset[:] = [sub[sub.index("--preset") + 1]]
        rc = run_cli(sub + ([] if "--dry-run" in sub else ["--dry-run"]), env)
        assert rc == 0, f"{cmd.where}: launch --dry-run exited {rc}"
        return "ran with --dry-run"
    if sub[:2] == ["dump", "run"]:
        from sglang_eagle3_ext.tiny.sample_dump import write_sample_dump

        a = parse_only(sub)
        n = write_sample_dump(
            cwd / "tiny-target",
            cwd / a.dump_dir,
            cwd / a.data,
            samples=DUMP_LIMIT,
            new_tokens=min(a.max_new_tokens, STANDIN_NEW_TOKENS) if a.generate else 0,
            layers=preset_layers(dump_preset[0]),
            quiet=True,
        )
        return f"parsed; the CPU sample dump wrote {n} samples"
    if sub[0] == "bench" or cmd.gpu:
        parse_only(sub)
        return "parsed (needs GPU servers)"
    rc = run_cli(sub + (_cpu_train(sub) if sub[0] == "train" else []), env)
    assert rc == 0, f"{cmd.where}: `{cmd.text}` exited {rc}"
    return "ran"


def test_tutorial_runs_on_cpu(tmp_path, monkeypatch, capsys):
    pytest.importorskip("speculators")
    pytest.importorskip("sglang")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)  # where the tutorial starts: the root of a checkout
    cwd, dump_preset, log = REPO, ["tiny-dump"], []
    cmds = bash_commands(TUTORIAL)
    assert any(c.gpu for c in cmds) and any(not c.gpu for c in cmds)
    for cmd in cmds:
        if cmd.argv[0] == "cd":
            cwd = Path(cmd.argv[1].replace("~", str(home), 1))
            assert cwd.is_dir() and home in cwd.parents, f"{cmd.where}: cd outside the tutorial's folder: {cwd}"
            monkeypatch.chdir(cwd)
            log.append(f"{cmd.where}: cd")
            continue
        assert cwd != REPO or cmd.argv[0] in ("pip", "mkdir", "cp"), (
            f"{cmd.where}: writes into the checkout; the tutorial works in a folder of its own"
        )
        t0 = time.monotonic()
        try:
            how = _step(cmd, cwd, home, dump_preset)
        except AssertionError as e:
            out = capsys.readouterr()
            raise AssertionError(
                f"{e}\n--- its output ---\n{(out.out + out.err)[-3000:]}\n--- before ---\n" + "\n".join(log)
            ) from None
        capsys.readouterr()
        log.append(f"{cmd.where}: {how} ({time.monotonic() - t0:.1f} s)")
    # what the loop made: a dump, an export, a converted draft
    from sglang_eagle3_ext.dump.manifest import read_manifest

    assert len(read_manifest(cwd / "dumps")) == DUMP_LIMIT, log
    assert (cwd / "draft" / "config.json").is_file() and (cwd / "hs").is_dir(), log
    # the CPU path: a sample dump computed here, exported, trained, converted
    assert len(read_manifest(cwd / "cpu-dumps")) == 16 and (cwd / "cpu-draft" / "config.json").is_file(), log
    print("\n".join(log))


def test_tutorial_marks_every_server_step():
    """Commands that need a server are marked `# gpu`; the rest run on a CPU as written."""
    for cmd in bash_commands(TUTORIAL):
        _, argv = _env_and_argv(cmd.argv)
        needs_server = (
            argv[:2] in (["sglang-eagle3", "launch"], ["sglang-eagle3", "bench"])
            or argv[:3] == ["sglang-eagle3", "dump", "run"]
            or (argv[:2] == ["sglang-eagle3", "build"] and not {"--preset", "--url"}.isdisjoint(argv))
        )
        assert needs_server == cmd.gpu, f"{cmd.where}: {cmd.text!r} {'lacks' if needs_server else 'has'} {GPU_MARK}"


def test_command_extraction(tmp_path):
    import textwrap

    md = tmp_path / "probe.md"
    text = textwrap.dedent("""\
        ```bash
        # a comment
        sglang-eagle3 tiny ./t  # trailing
        # gpu
        sglang-eagle3 launch --preset tiny \\
            --port 1
        ```
        ```python
        not = "a command"
        ```
        """)
    md.write_text(text)
    cmds = bash_commands(md)
    assert [(c.text, c.gpu) for c in cmds] == [
        ("sglang-eagle3 tiny ./t", False),
        ("sglang-eagle3 launch --preset tiny --port 1", True),
    ]


# ---- the README ------------------------------------------------------------------------------------------
def _readme_commands() -> list[Command]:
    return bash_commands(REPO / "README.md")


def test_readme_commands_parse():
    """Every `sglang-eagle3` command of the README is accepted by the real command line: launch commands run
    as --dry-run (the preset and SGLang's own arguments checked), the others are parsed."""
    pytest.importorskip("sglang")
    cmds = _readme_commands()
    assert sum(c.text.startswith("sglang-eagle3") or "sglang-eagle3 " in c.text for c in cmds) >= 10
    for cmd in cmds:
        env, argv = _env_and_argv(cmd.argv)
        if argv[0] == "pip":
            check_pip(cmd)
            for part in cmd.text.split("&&")[1:]:
                _readme_one(Command(cmd.where, part.strip(), cmd.gpu), {})
            continue
        if argv[0] == "bash":
            assert (REPO / argv[1]).is_file(), f"{cmd.where}: {argv[1]} missing"
            continue
        _readme_one(cmd, env)


def _readme_one(cmd: Command, env: dict) -> None:
    _, argv = _env_and_argv(cmd.argv)
    if argv[0] != "sglang-eagle3":
        return  # SGLang's own launcher, `export`: not ours to run
    sub = argv[1:]
    if sub[0] == "launch":
        extra = [] if "--dry-run" in sub or "--list-presets" in sub else ["--dry-run"]
        assert run_cli(sub + extra, env) == 0, f"{cmd.where}: `{cmd.text}` --dry-run failed"
    else:
        parse_only(sub)


def test_parse_only_refuses_unknown_flags():
    with pytest.raises(AssertionError, match="did not parse"):
        parse_only(["check", "./draft", "--no-such-flag"])
    assert parse_only(["check", "./draft"]).draft == "./draft"


# ---- the sample prompt files -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_prompts.jsonl", "chat_prompts.jsonl"])
def test_sample_prompts_are_read_by_dump_and_bench(name):
    from sglang_eagle3_ext.bench import prompts as bench_prompts
    from sglang_eagle3_ext.dump.client_files import read_samples

    path = REPO / "docs" / "examples" / name
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    samples, skipped, *_ = read_samples(path)
    assert len(samples) == len(lines) and skipped == 0
    parsed = [bench_prompts.parse_record(f"{path}:{i}", json.loads(ln)) for i, ln in enumerate(lines, 1)]
    assert all(parsed)
    if name == "tiny_prompts.jsonl":  # the tiny target: token ids inside its vocabulary, no tokenizer needed
        from sglang_eagle3_ext.tiny.deepseek_v3 import TINY_CONFIG

        ids = [i for s in samples for i in s["value"]]
        assert max(ids) < TINY_CONFIG["vocab_size"] and min(len(s["value"]) for s in samples) >= 8


# ---- working words ---------------------------------------------------------------------------------------
# Words about how the package was developed, not what it does; each pattern was seen in such a sentence.
WORKING_WORDS = [
    r"\bsessions? \d+",
    r"\bissues? #?\d+",
    r"\(issue\b",
    r"\bdevice calls?\b",
    r"\bproject's (offline )?(\w+ )?host\b",
    r"\bbundles?\b",
    r"\blent\b",
    r"build_bundles",
    r"\bshared/(reference|gpu)\b",
    r"\bheld host\b",
    r"\bhost is given back\b",
]
WORDS = re.compile("|".join(WORKING_WORDS), re.IGNORECASE)
# patches/*/*.patch carry SGLang's own source as context; the sample prompts are data; this file names the words
NOT_SCANNED = (
    re.compile(r"patches/[^/]+/.*\.patch$"),
    re.compile(r"docs/examples/"),
    re.compile(r"tests/unit/test_docs\.py$"),
)
DOCS_OF_USERS = (
    "README.md",
    "CONTRIBUTING.md",
    "ARCHITECTURE.md",
    "docs/",
    "tests/gpu/README.md",
    "tests/unit/test_install.py",
    "pyproject.toml",
)


def _repo_files() -> list[str]:
    p = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in p.stdout.splitlines() if not any(x.search(f) for x in NOT_SCANNED) and (REPO / f).is_file()]


def working_word_hits(files) -> list[str]:
    hits = []
    for f in files:
        try:
            text = (REPO / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = WORDS.search(line)
            if m:
                hits.append(f"{f}:{n}: {m.group(0)!r}: {line.strip()[:120]}")
    return hits


def test_working_words_pattern_finds_them():
    for s in (
        "as session 12 measured",
        "(issue 19)",
        "issue #16: aborted",
        "one device call",
        "the GPU host's bundles",
        "the project's offline H200 host",
        "see shared/reference/nccl-pcie.md",
    ):
        assert WORDS.search(s), s
    for s in ("a bundled tokenizer", "the server's session id", "silent", "issues a request", "(issued"):
        assert not WORDS.search(s), s


def test_user_documents_have_no_working_words():
    files = [f for f in _repo_files() if f.startswith(DOCS_OF_USERS)]
    assert "README.md" in files and "docs/tutorial.md" in files
    hits = working_word_hits(files)
    assert not hits, "working words in the documents:\n" + "\n".join(hits)


def test_no_working_words_anywhere():
    hits = working_word_hits(_repo_files())
    assert not hits, f"{len(hits)} lines speak of how the package was developed:\n" + "\n".join(hits)
