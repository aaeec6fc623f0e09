"""One function per stage: `fn(run) -> result` (a dict recorded in the stage's marker). Each calls the library
of the single command it stands for, with the same defaults, and writes the folder that command writes."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

from ..acceptance.evaluate import EvalOptions
from ..acceptance.evaluate import evaluate as predict
from ..acceptance.select import train_options
from ..boundary import Refused
from ..draft.check import check_draft, report_dict
from ..draft.convert import convert as convert_draft
from ..dump import driver
from ..dump.client_files import ClientError
from ..dump.export import ExportError
from ..json_file import write_json
from ..outdir import read_marker
from ..training import TrainOptions
from ..training.report import TrainDraftError
from . import state
from .digest import folder_id
from .report import write_report
from .server import dumping_server

EXPORT_FORMAT = "speculators"


class NegativeVerdict(Refused):
    """The stage ran and its verdict is negative (exit 1): a draft that did not learn, one check refuses, an
    incomplete dump."""

    def __init__(self, msg: str):
        super().__init__(msg, code=1)


def dump(run) -> dict:
    """The prompts sent to a dumping server (--url, or one started from --preset), resumed from the manifest."""
    o = run.o
    try:
        if o.url:
            return _dump_into(run, o.url)
        with dumping_server(
            o.preset,
            o.target,
            run.out / "dump",
            o.port,
            o.server_wait_s,
            run.out / "dump_server.log",
            run.say,
            o.dump_layers,
        ) as url:
            return _dump_into(run, url)
    except (ClientError, ExportError) as e:  # each names the input or the server and the fix
        raise Refused(str(e)) from None


def clear_dump(run, why: str) -> None:
    """Redoing the dump (--from dump) after its inputs changed: the samples dumped from the old ones go, since
    a resumed dump keeps every sample whose id it already holds."""
    d = run.out / "dump"
    if not d.exists():
        return
    if run.o.url:
        raise Refused(
            f"--from dump: {d} holds samples dumped from other inputs ({why}) and the server at --url writes "
            f"into it; stop that server, delete {d}, start it again and rerun"
        )
    run.say(f"dump: {d} holds samples dumped from other inputs ({why}); they are removed and every prompt dumped again")
    shutil.rmtree(d)


def _dump_into(run, url: str) -> dict:

    o = run.o
    opts = driver.RunOptions(
        data=o.data,
        dump_dir=str(run.out / "dump"),
        url=url,
        concurrency=o.concurrency,
        target=o.target,
        trust_remote_code=o.trust_remote_code,
        generate=o.generate,
        max_new_tokens=o.max_new_tokens,
        temperature=o.temperature,
        limit=o.limit,
        timeout=o.timeout,
        wait_s=o.wait_s,
        progress=not o.quiet,
    )
    check_layers(run, url)
    res = driver.run(opts, run.load_tokenizer)
    driver.warn_unfinished(opts, res)
    if res.fatal is not None:
        raise res.fatal
    check_layers(run, url)
    if not res.ok:
        raise NegativeVerdict(
            f"the dump in {run.out / 'dump'} is incomplete ({res.summary.get('not_written')} "
            f"sample(s) not written, {res.summary.get('failed_requests')} failed request(s)); "
            f"run build again to resume it"
        )
    return {k: v for k, v in res.summary.items() if isinstance(v, (int, float, str))}


def check_layers(run, url: str) -> None:
    """A dump train's settings name layers for (--layer-ids, or --draft-arch's own) holds those, or is refused
    before a prompt is sent: a server at --url dumps the layers it was started with."""
    from ..dump.config import META_FILE, DumpConfig, parse_layers
    from .plan import target_shape

    o, meta = run.o, run.out / "dump" / META_FILE
    if o.dump_layers is None or not meta.is_file():
        return
    import json

    have = json.loads(meta.read_text()).get("layer_indices_hf")
    n = target_shape(o.target)["num_hidden_layers"]
    try:
        want = DumpConfig(str(run.out / "dump"), parse_layers(o.dump_layers)).resolve_layers(n)
    except ValueError as e:
        raise Refused(f"train's layers for the dump: {e}") from None
    if have != want:
        raise Refused(
            f"the dump in {run.out / 'dump'} (server {url}) captures HF hidden_states {have}, but train's "
            f"settings read {want} ({o.dump_layers}): start the dumping server with "
            f"SGLANG_EAGLE3_EXT_DUMP_LAYERS={o.dump_layers}, or give --preset and let build start it"
        )


def export(run) -> dict:

    try:
        n = driver.export(
            run.o.dump_path,
            EXPORT_FORMAT,
            run.out / "export",
            data=run.o.data if not run.o.dump_dir else None,
            workers=run.o.export_workers,
            progress=not run.o.quiet,
        )
    except ExportError as e:
        raise Refused(str(e)) from None
    if n == 0:
        raise Refused(f"the dump {run.o.dump_path} holds no complete sample to train on; dump first")
    return {**driver.export_report(n, EXPORT_FORMAT, run.out / "export"), **state.dump_size(run.o.dump_path)}


def train_fields(run, *, resume: bool) -> dict:
    """TrainOptions fields of this build's training: its settings, build's folders."""
    return {
        **run.o.train,
        "data": str(run.out / "export"),
        "target": str(run.o.target),
        "out": str(run.out / "train"),
        "resume": resume,
        "force": not resume,
    }


def train(run) -> dict:
    """train_draft into train/; resumed from its checkpoint unless this stage is redone (--from)."""

    out = run.out / "train"
    resume = "train" not in run.redo and out.is_dir() and (read_marker(out) or {}).get("tool") == "train"
    if resume:
        run.say("train: continuing from the checkpoint in train/ (the epochs done are kept)")
    fields = train_fields(run, resume=resume)
    if run.o.gpus > 1:
        return _torchrun(run, fields)
    from ..training import train_draft

    try:
        summary = train_draft(train_options(fields))
    except TrainDraftError as e:
        if "did not learn" in str(e):  # report.require_learned: the run finished, its verdict is negative
            raise NegativeVerdict(str(e)) from None
        raise Refused(f"train: {e}") from None
    return summary_record(summary)


def summary_record(summary: dict) -> dict:
    keep = ("steps", "epochs", "first_loss", "final_loss", "train_acc", "val", "tokens_per_s", "saved", "selection")
    return {**{k: summary.get(k) for k in keep if k in summary}, "curve": epoch_curve(summary.get("history") or [])}


def epoch_curve(history: list) -> list[dict]:
    """Per epoch: the mean loss and first-token accuracy of its steps (the training curve of the report)."""
    by: dict[int, list] = {}
    for r in history:
        if isinstance(r, dict) and isinstance(r.get("epoch"), (int, float)):
            by.setdefault(int(r["epoch"]), []).append(r)
    out = []
    for e in sorted(by):
        rows = by[e]
        loss = [r["loss"] for r in rows if isinstance(r.get("loss"), (int, float))]
        acc = [r["full_acc_0"] for r in rows if isinstance(r.get("full_acc_0"), (int, float))]
        out.append(
            {
                "epoch": e + 1,
                "steps": len(rows),
                "loss": sum(loss) / len(loss) if loss else None,
                "acc": sum(acc) / len(acc) if acc else None,
            }
        )
    return out


def train_argv(fields: dict) -> list[str]:
    """The `train` flags of these TrainOptions fields (for the ranks under torchrun): the ones not at their
    default."""

    defaults = {f.name: f.default for f in dataclasses.fields(TrainOptions)}
    argv = []
    for k, v in fields.items():
        if v is None or v == defaults.get(k, object()) and k not in ("data", "target", "out"):
            continue
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            argv += [flag] if v else []
        else:
            argv += [flag, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    return argv


def _torchrun(run, fields: dict) -> dict:
    """One process per GPU, every rank the same `train` (rank 0 writes train/ and the summary)."""
    import json

    summary = run.out / ".build" / "train_summary.json"
    summary.parent.mkdir(parents=True, exist_ok=True)
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    cmd = [
        torchrun,
        "--standalone",
        "--nproc-per-node",
        str(run.o.gpus),
        "-m",
        "sglang_eagle3_ext",
        "train",
        *train_argv(fields),
        "--json",
        str(summary),
    ]
    run.say(f"train: {run.o.gpus} ranks under torchrun: {' '.join(cmd)}")
    rc = subprocess.call(cmd)
    if rc == 130:
        raise KeyboardInterrupt
    if rc != 0:
        raise (NegativeVerdict if rc == 1 else Refused)(f"train under torchrun exited {rc} (its error is above)")
    return summary_record(json.loads(summary.read_text()))


def convert(run) -> dict:

    report: dict = {}
    convert_draft(
        run.out / "train", run.out / "draft", force=True, progress=not run.o.quiet, log=run.say, report=report
    )
    return {"draft": str(run.out / "draft"), **{k: v for k, v in report.items() if isinstance(v, (str, int, list))}}


def check(run) -> dict:
    """check_draft on the draft; the files checked are those hashed into the stage's marker before it ran."""
    draft = run.out / "draft"
    rep = check_draft(draft, run.o.target, progress=not run.o.quiet)
    write_json(run.out / "check.json", report_dict(rep))
    run.say(rep.render())
    if not rep.checked or rep.errors:
        raise NegativeVerdict(
            f"check: the draft in {draft} would not serve as trained "
            f"({len(rep.errors)} problem(s), listed above and in {run.out / 'check.json'})"
        )
    now = folder_id(draft)
    if now != (state.read(run.out, "check") or {}).get("inputs", {}).get("draft"):
        raise NegativeVerdict(f"check: the draft in {draft} changed while it was checked; run build again")
    return {"ok": True, "draft_class": rep.draft_class, "release": rep.release, "draft_sha256": now["sha256"]}


def evaluate(run) -> dict:

    ratio = run.o.train.get("train_ratio") or 0.95
    rep = predict(
        EvalOptions(
            draft=str(run.out / "draft"),
            data=str(run.out / "export"),
            target=str(run.o.target),
            steps=run.o.spec_steps,
            heldout_fraction=1.0 - ratio if ratio < 1 else 1.0,
            samples=run.o.eval_samples,
            device=run.o.train.get("device"),
            dtype=run.o.eval_dtype,
            say=None if run.o.quiet else (lambda m: run.say(f"eval: {m}")),
        )
    )
    write_json(run.out / "eval.json", rep)
    return {
        "predicted_accept_length": rep.get("predicted_accept_length"),
        "positions": [p.get("p") for p in rep["rounds"]["positions"]],
        "steps": run.o.spec_steps,
    }


def report(run) -> dict:

    return write_report(run)


FUNCTIONS = {
    "dump": dump,
    "export": export,
    "train": train,
    "convert": convert,
    "check": check,
    "eval": evaluate,
    "report": report,
}
