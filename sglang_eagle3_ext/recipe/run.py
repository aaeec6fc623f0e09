"""`build(options)`: under the --out lock (lock.py), the stages in order. A stage is skipped when its marker
says it finished from today's inputs (fingerprint.py); resumed when it started from today's inputs; refused,
naming `--from STAGE` and what changed, when it was made from other inputs (unless --from redoes it). A stage
that runs makes every later one run afresh. build_config.yaml records the settings once a stage finished with
them; the report certifies the draft only while its files are the ones check passed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

from ..boundary import Refused
from ..json_file import write_atomic, write_json
from . import STAGES, fingerprint, lock, state
from .options import BuildOptions
from .report import certification, render_html
from .stages import FUNCTIONS, NegativeVerdict, clear_dump

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

    def stopped(self) -> str:
        """What an interrupt leaves: the stage it stopped and how to go on."""
        return (
            f"during stage {self.current or '(between stages)'}; run the same command again to resume "
            "(finished stages are kept)"
        )


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
    is running when an interrupt arrives. `config_text` (the settings as YAML) is written to build_config.yaml
    once a stage finished with them."""

    o.check()
    out = Path(o.out)
    check_out(out)
    if o.from_stage == "dump" and o.dump_dir:
        raise Refused("--from dump with --dump-dir: the dump is given, not made; leave one of them out")
    run = run or Run(o=o, out=out, redo=set(), say=o.say)
    run.o, run.out = o, out
    (out / state.STATE_DIR).mkdir(parents=True, exist_ok=True)
    with lock.held(out, run.say):
        return certify(run, _stages(run, config_text))


def _stages(run: Run, config_text: str | None) -> dict | None:
    o = run.o
    skipped: list[str] = []  # said once a stage runs or the build ends: a refusal stays one line
    if o.dump_dir:
        skipped.append(f"stage dump: skipped (--dump-dir {o.dump_dir}: starting from that dump)")
    if o.from_stage:
        run.redo |= set(STAGES[STAGES.index(o.from_stage) :])
    before, result = "", None
    for s in stages_to_run(o):
        rec = state.read(run.out, s, run.say)
        inputs, fp = _today(run, s, rec, before)
        if s not in run.redo and rec is not None:
            if rec["fingerprint"] != fp:
                raise Refused(changed_line(run.out, s, rec, inputs))
            if rec["state"] == state.DONE:
                skipped.append(f"stage {s}: complete, skipped")
                before, result = fp, {k: v for k, v in rec["result"].items() if k != "seconds"}
                continue
            skipped.append(f"stage {s}: resumed (it started earlier from the same inputs)")
        else:
            run.redo.add(s)  # nothing of it made from today's inputs to continue
        for line in skipped:
            run.say(line)
        skipped.clear()
        result = _run_stage(run, s, inputs, fp, rec)
        if config_text is not None:
            write_atomic(run.out / CONFIG_FILE, config_text)  # these settings built something
        before = fp
    for line in skipped:
        run.say(line)
    return result


def _today(run: Run, s: str, rec: dict | None, before: str) -> tuple[dict, str]:
    """(inputs, fingerprint) of stage `s` now."""
    o = run.o
    if s == "dump" and (rec is None or rec["state"] != state.DONE or s in run.redo):
        if not o.data or bool(o.url) == bool(o.preset):  # BuildOptions.check lets them go when the dump is kept
            raise Refused(
                f"the dump in {run.out / 'dump'} is not finished: give --data PROMPTS.jsonl and --url URL or "
                "--preset NAME to finish it"
            )
    if s == "dump" and not o.data:  # the dump kept as it was made
        return rec["inputs"], rec["fingerprint"]
    inputs = fingerprint.plain(fingerprint.stage_inputs(run, s))
    return inputs, fingerprint.fingerprint(s, inputs, before)


def changed_line(out: Path, s: str, rec: dict, inputs: dict) -> str:
    what = fingerprint.changed(rec["inputs"], inputs) or ["the output of an earlier stage it was made from"]
    made = "finished" if rec["state"] == state.DONE else "started"
    return (
        f"--out {out}: stage {s} {made} from other inputs than today's ({'; '.join(what)}); "
        f"pass --from {s} to redo it and every later stage, or give a new --out"
    )


def _run_stage(run: Run, s: str, inputs: dict, fp: str, rec: dict | None) -> dict:
    if s == "dump" and rec is not None and rec["fingerprint"] != fp:
        clear_dump(run, "; ".join(fingerprint.changed(rec["inputs"], inputs)))
    later = STAGES[STAGES.index(s) + 1 :]
    state.forget(run.out, later)  # they depend on what this stage writes now
    run.redo |= set(later)
    state.mark(run.out, s, fp, inputs)
    run.current = s
    run.say(f"stage {s}: started")
    t0 = time.monotonic()
    result = FUNCTIONS[s](run)
    run.seconds[s] = round(time.monotonic() - t0, 1)
    state.mark(run.out, s, fp, inputs, {**result, "seconds": run.seconds[s]})
    run.say(f"stage {s}: done in {run.seconds[s]:.1f} s")
    run.current = None
    return result


def certify(run: Run, result: dict | None) -> dict | None:
    """The draft on disk at the end must be the one check passed; otherwise it is not certified: the report
    says so, check and the stages after it count as not done (a re-run checks the draft as it is), exit 1."""
    rec = state.read(run.out, "check", run.say)
    if rec is None or rec["state"] != state.DONE:
        return result
    cert = certification(run.out)
    if cert["check"]:
        return result
    state.forget(run.out, STAGES[STAGES.index("check") :])
    if isinstance(result, dict) and "serve" in result:
        rep = {**result, **cert}
        write_json(run.out / "report.json", rep)
        write_atomic(run.out / "report.html", render_html(rep))
    raise NegativeVerdict(f"{cert['not_certified']}: not certified; run build again to check the draft as it is now")
