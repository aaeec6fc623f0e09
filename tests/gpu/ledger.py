"""The GPU ledger: each GPU stage, the commit, release, device and date it last ran on, and its figures.

A GPU machine may be available for minutes only and stop mid-run, so the plan is a list of short stages (each
<= 10 minutes, its own preparation included) and this ledger says which of them still have to run on the
current code. Figures are written as a stage produces them, so a host lost mid-stage keeps what it measured.

    python3 tests/gpu/ledger.py pending                  stages not yet passed on the code they test (needs git)
    python3 tests/gpu/ledger.py record STAGE RC [FILE..] on the GPU host: $OUT/ledger/STAGE.json from the exit
                                                         status and the figures the stage wrote (JSON files)
    python3 tests/gpu/ledger.py merge DIR..              fold fetched $OUT/ledger/*.json into tests/gpu/ledger.json
    python3 tests/gpu/ledger.py render                   the ledger as a table in docs/results.md

Standard library only: it runs on the GPU host before anything is installed there.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import knobs  # noqa: E402  (beside this file; standard library only)

REPO = HERE.parent.parent
LEDGER = HERE / "ledger.json"
RESULTS = REPO / "docs" / "results.md"
_INTRO = (
    "\n\n## The GPU ledger\n\n"
    "Each GPU stage and the code it last ran on, since the ledger began (earlier figures: above).\n\n"
)
BEGIN, END = "<!-- gpu ledger: begin (tests/gpu/ledger.py render) -->", "<!-- gpu ledger: end -->"


class Stage(NamedTuple):
    name: str
    minutes: int  # its own preparation included
    what: str
    paths: tuple[str, ...]  # the code it tests: a change there since its last pass makes it pending


_PKG = "sglang_eagle3_ext"
STAGES = (
    Stage("smoke", 6, "dump vs transformers, EAGLE-3 serve, swap (tiny target)", (_PKG, "tests/gpu")),
    Stage("build", 6, "`build` from prompts to a served draft, interrupted and resumed (tiny target)", (_PKG,)),
    Stage(
        "tune_tiny",
        10,
        "the tiny target's round trip prepared, then `tune --budget-min 5` to its presets",
        (f"{_PKG}/tune", f"{_PKG}/bench", f"{_PKG}/server", "tests/gpu/test_tune_gpu.py"),
    ),
    Stage(
        "dflash_serve",
        6,
        "a random DFlash draft served by SGLang's DFLASH worker through the strict loader; a renamed tensor served "
        "by plain SGLang, refused by ours",
        (f"{_PKG}/targets", f"{_PKG}/draft", "tests/gpu/test_dflash_gpu.py"),
    ),
    Stage(
        "dflash",
        12,
        "a DFlash draft trained on the tiny round trip's export, served beside its EAGLE-3 draft (tiny target)",
        (_PKG, "tests/gpu/test_dflash_gpu.py"),
    ),
)
BY_NAME = {s.name: s for s in STAGES}


def _load(path: Path = LEDGER) -> dict:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: not a JSON object; fix or delete it")
    return data


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def is_pending(stage: Stage, entry: dict | None) -> str | None:
    """Why `stage` still has to run, or None when its last pass covers the code as it is."""
    if not entry:
        return "never ran"
    if entry.get("rc") != 0:
        return f"last run failed (exit {entry.get('rc')})"
    commit = entry.get("commit")
    if not commit or _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return "its commit is unknown here"
    if _git("diff", "--quiet", commit, "--", *stage.paths) is None:  # exit 1: something differs
        return f"code changed since {commit[:9]}"
    dirty = _git("status", "--porcelain", "--", *stage.paths)
    return "uncommitted changes in its code" if dirty else None


def pending(ledger: dict) -> list[tuple[Stage, str]]:
    out = []
    for stage in STAGES:
        why = is_pending(stage, ledger.get(stage.name))
        if why:
            out.append((stage, why))
    return out


def _device() -> str:
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=True
        )
        names = [n.strip() for n in p.stdout.splitlines() if n.strip()]
        return f"{len(names)}x {names[0]}" if names else "no GPU"
    except (OSError, subprocess.CalledProcessError):
        return "no GPU"


def _release() -> str | None:
    try:
        from importlib.metadata import version

        return version("sglang")
    except (ImportError, ValueError):  # not installed, or metadata unreadable: the entry says unknown
        return None


def record(stage: str, rc: int, figure_files: list[str], out: Path, commit: str | None) -> Path:
    if stage not in BY_NAME:
        raise SystemExit(f"unknown stage {stage!r}; stages: {', '.join(BY_NAME)}")
    figures = {}
    for f in figure_files:
        p = Path(f)
        if p.is_file():
            try:
                figures[p.name] = json.loads(p.read_text())
            except ValueError:
                figures[p.name] = {"unreadable": True}
    entry = {
        "stage": stage,
        "rc": rc,
        "commit": commit,
        "release": _release(),
        "device": _device(),
        "date": datetime.date.today().isoformat(),
        "figures": figures,
    }
    dest = out / "ledger" / f"{stage}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(entry, indent=1) + "\n")
    return dest


def merge(dirs: list[str], ledger_path: Path = LEDGER) -> dict:
    ledger = _load(ledger_path)
    for d in dirs:
        for f in sorted(Path(d).rglob("*.json")):
            entry = json.loads(f.read_text())
            if isinstance(entry, dict) and entry.get("stage") in BY_NAME and "rc" in entry:
                ledger[entry["stage"]] = entry
    ledger_path.write_text(json.dumps(ledger, indent=1, sort_keys=True) + "\n")
    return ledger


def table(ledger: dict) -> str:
    rows = ["| stage | what | last run | exit | commit | SGLang | device |", "|---|---|---|---|---|---|---|"]
    for s in STAGES:
        e = ledger.get(s.name) or {}
        rows.append(
            f"| {s.name} | {s.what} | {e.get('date', 'not yet recorded')} | {e.get('rc', '')} | {(e.get('commit') or '')[:9]} | "
            f"{e.get('release') or ''} | {e.get('device') or ''} |"
        )
    return "\n".join(rows)


def render(ledger: dict, results: Path = RESULTS) -> None:
    text = results.read_text()
    block = f"{BEGIN}\n{table(ledger)}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + _INTRO + block + "\n"
    results.write_text(text)


def main(argv: list[str]) -> int:
    verb = argv[0] if argv else "pending"
    if verb == "pending":
        for stage, why in pending(_load()):
            print(f"{stage.name}\t~{stage.minutes} min\t{why}")
    elif verb == "record":
        commit = knobs.get("SGE3_LEDGER_COMMIT")
        out = Path(os.environ.get("OUT") or knobs.get("SGE3_LOG_DIR"))
        print(record(argv[1], int(argv[2]), argv[3:], out, commit))
    elif verb == "merge":
        merge(argv[1:])
    elif verb == "render":
        render(_load())
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
