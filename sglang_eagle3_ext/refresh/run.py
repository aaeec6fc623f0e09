"""`refresh(RefreshOptions(...))`: a better draft from the traffic it serves.

1. the dump's samples the cursor does not hold (optionally only weakly-served requests), split train / held-out;
2. both parts exported for training (the dump's own exporter), the current draft evaluated on the held-out part;
3. training continues from the current draft's weights (the same recipe: `train --init-from`);
4. the result converted to the layout SGLang serves, checked, evaluated on the same held-out part;
5. the gate: accepted when its predicted accept length beats the current draft's by `margin`, else the current
   one stays (the report says why); with `swap_url` the new draft is swapped into the running server, whose
   served draft is the one training starts from and the gate judges against;
6. the cursor (a journal, refresh/cursor.py): the samples are recorded as pending before --out is written and
   as used by the new draft only once it is served (accepted; with `swap_url`, reported served by the server).
Everything is written into `out` (a new folder): data/, train/, draft/ (the new draft), refresh.json.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ..boundary import BadInput, Refused, writable_dir
from .options import RefreshOptions
from .settle import entry, same_draft, settle


def _stage(say, what: str):
    t0 = time.monotonic()
    say(f"{what} ...")
    return lambda: round(time.monotonic() - t0, 1)


def _check_inputs(o: RefreshOptions) -> tuple[Path, dict]:
    from ..draft.check import describe_draft
    from ..dump.export import ExportError, require_dump_dir

    try:
        dump = require_dump_dir(o.dump_dir)
        writable_dir(dump, "--dump-dir (where the cursor of used samples is kept)")
    except ExportError as e:
        raise Refused(str(e)) from None  # it names --dump-dir already
    except BadInput as e:
        raise Refused(f"--dump-dir {o.dump_dir}: {e}") from None
    if not (0 < o.heldout_fraction < 1):
        raise Refused(f"--heldout-fraction {o.heldout_fraction}: expected a number in (0, 1)")
    desc = describe_draft(o.draft, target=o.target)
    if not desc["ok"]:
        raise Refused(
            f"--draft {o.draft}: not a draft SGLang serves as is ({'; '.join(desc['errors'])}); give the "
            f"served draft's folder"
        )
    return dump, desc


def _target(o: RefreshOptions, dump: Path) -> str:
    from ..acceptance.data import recorded_model_path

    if o.target:
        return o.target
    mp = recorded_model_path(dump)
    if not mp or not (Path(mp) / "config.json").is_file():
        raise Refused(f"--dump-dir {dump} records no local target folder ({mp!r}); pass --target DIR")
    return mp


def _export(dump: Path, ids: list, out: Path, workers: int) -> None:
    from ..dump.export import ExportError
    from ..dump.exporters import get

    try:
        get("speculators")(dump, out, order=ids, workers=workers, progress=True)
    except ExportError as e:  # names the sample or the dump's file
        raise Refused(f"--dump-dir {dump}: {e}") from None


def _predict(o: RefreshOptions, draft, data: Path, target: str) -> dict:
    from ..acceptance.evaluate import EvalOptions, evaluate

    rep = evaluate(
        EvalOptions(
            draft=str(draft),
            data=str(data),
            target=target,
            steps=o.spec_steps,
            heldout_fraction=1.0,
            samples=o.eval_samples,
            device=o.device,
            dtype=o.dtype,
        )
    )
    return {
        "predicted_accept_length": rep["predicted_accept_length"],
        "positions": [p["p"] for p in rep["rounds"]["positions"]],
        "samples": rep["heldout"]["samples"],
        "samples_per_s": rep["samples_per_s"],
    }


def _train(o: RefreshOptions, data: Path, target: str, out: Path) -> dict:
    """Training continued from the served draft (its layout, shape and vocabulary: train --init-from)."""
    from ..training import TrainOptions, train_draft

    fields = dict(
        data=str(data),
        target=target,
        out=str(out),
        init_from=str(o.draft),
        epochs=o.epochs,
        lr=o.lr,
        device=o.device,
        min_val_acc=0.0,
        **({"loss_impl": o.loss_impl} if o.loss_impl else {}),
    )
    fields.update(o.train_options)
    return train_draft(TrainOptions(**fields))


def _servable(trained: Path, dst: Path, target: str) -> list[str]:
    """The trained draft in the layout SGLang serves (dst); the check's errors (empty: servable)."""
    from ..draft.check import check_draft
    from ..draft.convert import convert
    from ..draft.errors import DraftError

    try:
        convert(trained, dst, progress=False, log=lambda *a, **k: None)
    except DraftError as e:  # a trained draft that does not convert is one the gate turns down, by name
        return [str(e).replace("\n", " ")]
    rep = check_draft(dst, target=target)
    return [str(p) for p in rep.errors]


def _gate(o: RefreshOptions, before: dict, after: dict | None, problems: list) -> tuple[bool, str]:
    if problems:
        return False, f"the new draft fails check: {'; '.join(problems)}"
    a, b = after["predicted_accept_length"], before["predicted_accept_length"]
    if a is None or b is None:
        return False, "no accept length could be predicted on the held-out samples"
    if a - b >= o.margin:
        return True, f"predicted accept length {b:.3f} -> {a:.3f} (+{a - b:.3f} >= margin {o.margin:g})"
    return False, (
        f"predicted accept length {b:.3f} -> {a:.3f} ({a - b:+.3f} < margin {o.margin:g}): the current draft stays"
    )


def _build(o: RefreshOptions, dump: Path, sel, target: str, tmp: Path, say) -> dict:
    """Steps 2-4 into `tmp`; the report's figures."""
    rep: dict = {}
    done = _stage(say, f"exporting {len(sel.train)} training + {len(sel.heldout)} held-out samples")
    _export(dump, sel.train, tmp / "data" / "train", o.workers)
    _export(dump, sel.heldout, tmp / "data" / "heldout", o.workers)
    rep["export_s"] = done()
    done = _stage(say, f"predicting the current draft's accept length on {len(sel.heldout)} held-out samples")
    rep["before"] = _predict(o, o.draft, tmp / "data" / "heldout", target)
    say(f"current draft: predicted accept length {rep['before']['predicted_accept_length']:.3f} ({done()} s)")
    done = _stage(say, f"training from the current draft ({o.epochs} epoch(s), lr {o.lr:g})")
    summary = _train(o, tmp / "data" / "train", target, tmp / "train")
    rep["train"] = {
        k: summary.get(k) for k in ("steps", "epochs", "train_loss", "train_acc", "init_from") if k in summary
    }
    rep["train_s"] = done()
    done = _stage(say, "converting and checking the new draft")
    problems = _servable(tmp / "train", tmp / "draft", target)
    rep["check"] = problems or "passed"
    if not problems:
        rep["after"] = _predict(o, tmp / "draft", tmp / "data" / "heldout", target)
        say(f"new draft: predicted accept length {rep['after']['predicted_accept_length']:.3f} ({done()} s)")
    rep["accepted"], rep["reason"] = _gate(o, rep["before"], rep.get("after"), problems)
    return rep


def _served_draft(o: RefreshOptions, say) -> RefreshOptions:
    """With --swap: the draft the server serves, which --draft must be (the gate judges against it, the swap
    replaces it); --draft left out means that one. Before anything long: a server that cannot take a draft is
    said now."""
    from ..draft.swap.client import can_swap

    served = can_swap(o.swap_url)
    if o.draft is None:
        say(f"--swap {o.swap_url}: it serves {served}, the draft this refresh starts from and must beat")
        return dataclasses.replace(o, draft=served)
    if not same_draft(o.draft, served):
        raise Refused(
            f"--draft {o.draft} is not the draft {o.swap_url} serves ({served}): the new draft must beat "
            f"the one it replaces; pass --draft {served} or leave --draft out"
        )
    say(f"--swap {o.swap_url}: it serves {served} and can take a new draft")
    return o


def _check_out(o: RefreshOptions, dump: Path, target: str) -> dict:
    """How --out is written; refused before anything is read or recorded."""
    from .. import outdir

    real = Path(os.path.abspath(o.out))
    if real.is_dir() and any(real.iterdir()) and (outdir.read_marker(real) or {}).get("tool") == "refresh":
        raise Refused(
            f"--out {o.out}: holds an earlier refresh's output, which refresh never replaces; choose a new folder"
        )
    rule = dict(
        tool="refresh",
        flag="--out",
        replace=False,
        inputs=[("dump dir (--dump-dir)", dump), ("draft (--draft)", o.draft), ("target", target)],
    )
    outdir.check(o.out, **rule)
    return rule


def refresh(o: RefreshOptions) -> dict:
    """Run one refresh; the report (`accepted`, `reason`, figures). Refused on bad input."""
    import secrets

    from .. import outdir
    from . import cursor as cur
    from .traffic import check_samples, select

    say = o.say or (lambda m: None)
    if o.swap_url:
        o = _served_draft(o, say)
    elif o.draft is None:
        raise Refused("--draft is required without --swap (with --swap it defaults to the served draft)")
    dump, desc = _check_inputs(o)
    target = _target(o, dump)
    rule = _check_out(o, dump, target)
    t0 = time.monotonic()
    with cur.exclusive(dump):
        c = cur.read_cursor(dump)
        if c.pending:
            settle(c, say)
        sel, bad = check_samples(dump, select(dump, c.consumed, o.heldout_fraction, o.max_accept_len), o.workers)
        base = _selection_report(o, dump, target, desc, sel, len(c.consumed), say, bad)
        if len(sel.ids) < o.min_samples:
            rep = {
                **base,
                "accepted": False,
                "out": None,
                "reason": f"{len(sel.ids)} selected sample(s) < "
                f"--min-samples {o.min_samples}: nothing trained, the current draft stays (serve more traffic "
                f"with dumping on, or lower --min-samples)",
            }
            _write_report_out(o, rep)
            return rep
        say(f"{len(sel.heldout)} sample(s) held out to judge both drafts on: recorded as held out, never trained")
        out = Path(os.path.abspath(o.out))
        rid = secrets.token_hex(8)
        c.begin(
            {
                "id": rid,
                "out": str(out),
                "draft": str(out / "draft"),
                "swap_url": o.swap_url,
                "trained": sel.train,
                "heldout": sel.heldout,
            }
        )
        try:
            with outdir.writing(o.out, **rule, record={"dump_dir": str(dump)}) as tmp:
                rep = {**base, **_build(o, dump, sel, target, Path(tmp), say), "refresh_id": rid}
                rep["draft_after"] = str(out / "draft")
                _write_report(Path(tmp) / "refresh.json", rep)
        except BaseException as e:  # --out was not written: its samples stay for the next refresh
            why = "interrupted" if isinstance(e, KeyboardInterrupt) else f"failed: {e}"
            c.finish(entry(accepted=False, reason=why, out=None, samples=len(sel.ids)), False)
            raise
        rep["out"], rep["seconds"] = str(out), round(time.monotonic() - t0, 1)
        _serve_and_record(o, c, sel, rep, say)
    return rep


def _selection_report(o: RefreshOptions, dump: Path, target: str, desc: dict, sel, used_before: int, say, bad) -> dict:
    """The report's figures known once the samples are selected and read (said in one line each)."""
    base = {
        "dump_dir": str(dump),
        "draft_before": str(Path(o.draft).resolve()),
        "target": target,
        "layout": desc.get("layout"),
        "new_samples": sel.new,
        "selected": len(sel.ids),
        "train_samples": len(sel.train),
        "heldout_samples": len(sel.heldout),
        "skipped": sel.skipped,
        "bad_samples": bad,
        "already_used": used_before,
        "margin": o.margin,
        "spec_steps": o.spec_steps,
    }
    if bad:
        say(
            f"{len(bad)} sample(s) skipped, not training samples: "
            + "; ".join(f"{b['id']} ({b['problem']})" for b in bad[:3])
            + (f"; and {len(bad) - 3} more (the report lists them)" if len(bad) > 3 else "")
        )
    say(
        f"{sel.new} sample(s) since the last refresh ({used_before} used before), {len(sel.ids)} selected"
        + "".join(f", {n} skipped: {why}" for why, n in sel.skipped.items())
    )
    return base


def _serve_and_record(o: RefreshOptions, c, sel, rep: dict, say) -> None:
    """Once --out is written: an accepted draft swapped in (with --swap), then the cursor settled: the samples
    are used only when the new draft serves."""
    if rep["accepted"] and o.swap_url:
        rep["swap"] = _swap(o, rep["draft_after"], say)
    served = rep["accepted"] and (not o.swap_url or rep["swap"]["ok"])
    rep["samples_used"] = bool(served)
    try:
        _write_report_out(o, rep)
    except BaseException as e:  # the refresh did not complete: its samples stay unused
        rep["samples_used"] = False
        c.finish(entry(accepted=rep["accepted"], reason=f"failed: {e}", out=rep["out"], samples=len(sel.ids)), False)
        raise
    c.finish(
        entry(
            accepted=rep["accepted"],
            reason=rep["reason"],
            out=rep["out"],
            draft=rep["draft_after"],
            samples=len(sel.ids),
            trained=len(sel.train),
            heldout=len(sel.heldout),
            before=rep["before"]["predicted_accept_length"],
            after=(rep.get("after") or {}).get("predicted_accept_length"),
            swap=None if not o.swap_url or not rep["accepted"] else bool(rep["swap"]["ok"]),
        ),
        served,
    )


def _swap(o: RefreshOptions, draft: str, say) -> dict:
    from ..draft.swap.client import SwapOptions, can_swap, swap

    say(f"swapping {draft} into {o.swap_url}")
    try:
        return swap(SwapOptions(url=o.swap_url, draft=draft, timeout=o.swap_timeout, say=say))
    except (Refused, BadInput) as e:  # the new draft stays in --out: the report says why it is not served
        rep = {"ok": False, "error": str(e), **(getattr(e, "report", None) or {})}
    try:  # a swap the client gave up on may still finish on the server: what it serves now decides
        if same_draft(can_swap(o.swap_url), draft):
            say(f"{o.swap_url} serves {draft} after all ({rep['error']})")
            return {**rep, "ok": True, "served_after_error": True}
    except (Refused, BadInput):
        pass
    return rep


def _write_report_out(o: RefreshOptions, rep: dict) -> None:
    """The caller's report (--json), written once the refresh has its verdict."""
    if o.report is None:
        return
    try:
        o.report(rep)
    except OSError as e:
        raise Refused(f"the report could not be written ({e.strerror or e}): its samples stay unused") from None


def _write_report(path: Path, rep: dict) -> None:
    import json

    path.write_text(json.dumps(rep, indent=2, default=str) + "\n")


def render(rep: dict) -> str:
    """`refresh`'s report as text."""
    verdict = "accepted" if rep["accepted"] else "not accepted"
    lines = [
        f"refresh: {verdict}: {rep['reason']}",
        f"  samples: {rep['selected']} selected of {rep['new_samples']} new "
        f"({rep['train_samples']} trained on, {rep['heldout_samples']} held out)",
    ]
    if rep.get("bad_samples"):
        lines.append(f"  skipped: {len(rep['bad_samples'])} bad sample(s), named in the report")
    if rep.get("out"):
        lines.append(f"  new draft: {rep['draft_after']} (report: {rep['out']}/refresh.json)")
    sw = rep.get("swap")
    if sw:
        said = f"done, pause {sw.get('pause_s')} s" if sw.get("ok") else f"refused: {sw['error']}"
        lines.append(f"  swap: {said}")
    return "\n".join(lines)
