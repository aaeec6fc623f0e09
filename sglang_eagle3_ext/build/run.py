"""`build(options)`: the stages in order, each skipped when its marker says it finished, each that runs making
every later stage run again; one line per stage start and end with its time."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

from ..boundary import Refused
from . import STAGES, state
from .options import BuildOptions
from .stages import FUNCTIONS

CONFIG_FILE = "build_config.yaml"


@dataclasses.dataclass
class Run:
    o: BuildOptions
    out: Path
    redo: set
    say: Callable[[str], None]
    load_tokenizer: Callable | None = None
    seconds: dict = dataclasses.field(default_factory=dict)
    current: str | None = None  # the stage running now (an interrupt names it)


def check_out(out: Path) -> None:
    """--out is new, empty, or an earlier build's (it has the markers' folder): never someone else's folder."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise Refused(f"--out {out}: not a folder; give a new folder or an earlier build's --out")
    if out.is_dir() and any(out.iterdir()) and not (out / state.STATE_DIR).is_dir():
        raise Refused(f"--out {out}: holds files that are not an earlier build's output; give a new or empty folder")


def stages_to_run(o: BuildOptions) -> list[str]:
    return [s for s in STAGES if not (s == "dump" and o.dump_dir)]


def build(o: BuildOptions, run: Run | None = None, config_text: str | None = None) -> dict:
    """Run (or resume) the build `o`; the report. `run` (made here when None) lets a caller see which stage
    is running when an interrupt arrives."""

    o.check()
    out = Path(o.out)
    check_out(out)
    if o.from_stage == "dump" and o.dump_dir:
        raise Refused("--from dump with --dump-dir: the dump is given, not made; leave one of them out")
    run = run or Run(o=o, out=out, redo=set(), say=o.say)
    run.o, run.out = o, out
    (out / state.STATE_DIR).mkdir(parents=True, exist_ok=True)
    if config_text is not None:
        state.write_atomic(out / CONFIG_FILE, config_text)
    if o.dump_dir:
        run.say(f"stage dump: skipped (--dump-dir {o.dump_dir}: starting from that dump)")
    if o.from_stage:
        run.redo |= set(STAGES[STAGES.index(o.from_stage) :])
        state.forget(out, run.redo)
    result = None
    for s in stages_to_run(o):
        rec = None if s in run.redo else state.done(out, s)
        if rec is not None:
            run.say(f"stage {s}: complete, skipped")
            result = rec
            continue
        later = set(STAGES[STAGES.index(s) + 1 :])
        state.forget(out, later)  # they depend on what this stage writes now
        run.current = s
        run.say(f"stage {s}: started")
        t0 = time.monotonic()
        result = FUNCTIONS[s](run)
        run.seconds[s] = round(time.monotonic() - t0, 1)
        state.mark_done(out, s, {**result, "seconds": run.seconds[s]})
        run.say(f"stage {s}: done in {run.seconds[s]:.1f} s")
        run.current = None
    return result
