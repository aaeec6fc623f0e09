"""`tune(TuneOptions(...))`: the accept side offline, the timing pass per backend, the cost model, the best
candidates measured, presets, the adaptive config, the plot and the projection; `render` prints the report.
Every refusal comes before anything starts (Refused: one line naming the input and the fix)."""

from __future__ import annotations

import dataclasses
import json
import logging
import shlex
import time
from pathlib import Path

from ..bench import prompts as P
from ..boundary import Refused
from . import backends as B
from . import costmodel, search
from . import timings as T
from .accept import accept_lengths
from .options import TuneOptions
from .outputs import project_best, write_adaptive, write_plot, write_presets
from .search import best_per_band
from .servers import TIMING_STEPS, Budget, check_servers, min_budget_min
from .timing import TimingPlan, time_backend

log = logging.getLogger("sglang_eagle3_ext.tune")


def _say(o: TuneOptions):
    return o.say or (lambda m: None)


def _check_inputs(o: TuneOptions) -> dict:
    """Cheap refusals first: the folders, the dump, the backends against the release, the server commands against
    its parser, the budget."""
    for flag, d in (("--target", o.target), ("--draft", o.draft)):
        if not (Path(d) / "config.json").is_file():
            raise Refused(f"{flag} {d}: no config.json there; give the {flag[2:]} model's folder")
    if not Path(o.data).exists():
        raise Refused(
            f"--data {o.data}: no such dump; give the dump folder `sglang-eagle3 dump` wrote (or a training export)"
        )
    if o.prompts and not Path(o.prompts).is_file():
        raise Refused(f"--prompts {o.prompts}: no such file; give a JSONL / ShareGPT prompt file")
    from ..versions import installed_version

    version = installed_version() or "?"
    B.refuse_unknown(list(o.backends), B.release_choices(), version)
    try:
        extra = shlex.split(o.server_args)
    except ValueError as e:
        raise Refused(f"--server-args {o.server_args!r}: not shell words ({e}); quote it as one string") from None
    srv = check_servers(o, list(o.backends), extra)
    least = min_budget_min(srv["gpus"])
    if o.timings is None and o.budget_min is not None and o.budget_min < least:
        raise Refused(
            f"--budget-min {o.budget_min:g}: one timing pass needs at least {least:g} GPU minutes"
            + (f" ({srv['gpus']} GPUs a server)" if srv["gpus"] > 1 else "")
            + "; raise it, or pass --timings FILE of an earlier run"
        )
    return {"sglang": version, "extra": extra, **srv}


def _target_shape(target: str) -> dict:
    from ..server.runtime import language_config, read_config

    c = language_config(read_config(target) or {})
    return {
        "layers": c.get("num_hidden_layers"),
        "vocab": c.get("vocab_size"),
        "hidden": c.get("hidden_size"),
        "mla": bool(c.get("kv_lora_rank")) if c else None,
    }


def _has_adaptive() -> bool:
    try:
        from ..versions import capabilities

        return capabilities().HAS_SPEC_ADAPTIVE
    except Exception:  # noqa: BLE001 - no SGLang here: no adaptive config
        return False


def plan(o: TuneOptions) -> dict:
    env = _check_inputs(o)
    shape = _target_shape(o.target)

    acc = accept_lengths(o.draft, o.data, o.target, o.heldout_fraction, o.samples, o.device, dry_run=True)
    decisions = B.decide(list(o.backends), B.gpu_capability(), shape["mla"], logged=False)  # the plan lists them
    chosen = [d.backend for d in decisions if d.chosen]
    from .servers import LAUNCHER, server_args

    c = max(o.concurrency)
    cmds = [
        [LAUNCHER, *server_args(o.target, b, c, o.draft, s, extra=env["extra"])]
        for b in chosen
        for s in (0, *TIMING_STEPS)
    ]
    per_pass = min_budget_min(env["gpus"])
    notes = ["dry run: inputs checked, no weight loaded, no server started"]
    notes.append(
        "every server command parsed by SGLang's own parser"
        if env["parsed"]
        else "server commands not parsed: SGLang cannot be imported here"
    )
    return {
        "dry_run": True,
        "sglang": env["sglang"],
        "target": o.target,
        "draft": o.draft,
        "data": o.data,
        "concurrency": o.concurrency,
        "accept_side": {"steps": list(range(1, 9)), "topk": 1, "heldout": acc.get("heldout")},
        "backends": [dataclasses.asdict(d) for d in decisions],
        "timing_pass": "recorded: " + o.timings
        if o.timings
        else {"servers_per_backend": 3, "commands": [" ".join(x) for x in cmds]},
        "budget": {
            "limit_gpu_min": o.budget_min,
            "estimate_gpu_min_per_timing_pass": per_pass,
            "estimate_gpu_min_all": per_pass * len(chosen) + (1 + o.per_band) * 2.0 * len(o.concurrency) * env["gpus"],
            "gpus_per_server": env["gpus"],
        },
        "adaptive_config": _has_adaptive(),
        "out": o.out,
        "notes": notes + ([env["max_running"]] if env["max_running"] else []),
    }


def tune(o: TuneOptions) -> dict:
    if o.dry_run:
        return plan(o)
    say = _say(o)
    env = _check_inputs(o)
    out = Path(o.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    shape = _target_shape(o.target)

    acc = accept_lengths(o.draft, o.data, o.target, o.heldout_fraction, o.samples, o.device, say)
    accept = {int(k): v for k, v in acc["by_steps"].items() if v is not None}
    say("accept length by steps: " + "  ".join(f"{k}:{v:.2f}" for k, v in accept.items()))
    if env["max_running"]:
        say(env["max_running"])
    budget = Budget(o.budget_min, gpus=env["gpus"], say=say)
    if o.timings:
        tm = T.read(o.timings)
    else:
        tm = _timing_pass(o, env, shape, budget, out, say)
        T.write(out / "timings.json", tm)
    models, errs = _fit(tm, accept, o.budget_min, env["gpus"])
    grid = costmodel.grid(models, accept, o.concurrency)

    cands = search.top_candidates(grid, o.concurrency, o.per_band)
    measured = []
    if not o.no_measure:
        measured = search.measure(
            cands,
            o.target,
            o.draft,
            o.prompts,
            o.tokenizer,
            tuple(o.new_tokens),
            o.num_prompts,
            out,
            env["extra"],
            budget,
            say,
        )
    best = _best(grid, measured, o.concurrency)
    rep = {
        "tool": "sglang-eagle3 tune",
        "command": o.command,
        "sglang": env["sglang"],
        "target": o.target,
        "draft": o.draft,
        "data": o.data,
        "concurrency": o.concurrency,
        "accept": {
            "by_steps": accept,
            "per_request": acc.get("per_request"),
            "positions": acc.get("positions"),
            "samples": acc.get("samples"),
            "topk": 1,
            "trees": acc.get("trees"),
        },
        "backends_timed": list(tm["backends"]),
        "parts": _parts(models),
        "model_error": errs,
        "predicted": grid,
        "candidates": {c: [x.label for x in cs] for c, cs in cands.items()},
        "measured": measured,
        "best": best,
    }
    rep["adaptive"] = (
        write_adaptive(o, rep, models, accept, out)
        if _has_adaptive()
        else {"written": False, "why": "the installed SGLang has no --speculative-adaptive"}
    )
    rep["presets"] = write_presets(o, rep, out)
    rep["projection"] = project_best(models, accept, best, shape, tm.get("tp_size") or 1)
    rep["plot"] = str(write_plot(rep, models, accept, out))
    rep["budget"] = {**budget.as_dict(), "wall_min": round((time.monotonic() - t0) / 60, 2)}
    (out / "tune.json").write_text(json.dumps(_jsonable(rep), indent=1) + "\n")
    return rep


def _fit(tm: dict, accept: dict, budget_min, gpus: int = 1) -> tuple[dict, dict]:
    """The cost model of every backend with a complete timing pass, and its errors; refused when there is none."""
    models, errs = {}, {}
    for name, b in tm["backends"].items():
        try:
            models[name] = costmodel.fit(name, b)
            errs[name] = costmodel.errors(models[name], b, accept)
        except ValueError as e:
            log.info("cost model: %s left out (%s)", name, e)
    if not models:
        raise Refused(
            f"no backend has a complete timing pass within --budget-min {budget_min}: raise it "
            f"(one pass needs {min_budget_min(gpus):g} GPU minutes)"
        )
    return models, errs


def _timing_pass(o: TuneOptions, env: dict, shape: dict, budget: Budget, out: Path, say) -> dict:

    decisions = B.decide(list(o.backends), B.gpu_capability(), shape["mla"])
    if not any(d.chosen for d in decisions):
        raise Refused(
            "no attention backend of --backends runs here: " + "; ".join(f"{d.backend}: {d.reason}" for d in decisions)
        )
    ps = (
        P.from_file(o.prompts, 64, o.tokenizer)
        if o.prompts
        else P.builtin("random-ids", 64, 0, int(shape["vocab"] or 32000))
    )
    tp = TimingPlan(o.target, o.draft, list(o.concurrency), ps.prompts, out, env["extra"])
    res = {
        "format": "sglang-eagle3-tune-timings/1",
        "gpu": _gpu_name(),
        "sglang": env["sglang"],
        "target_layers": shape["layers"],
        "tp_size": env["tp"],
        "backends": {},
    }
    for d in decisions:
        if d.chosen:
            b = time_backend(tp, d.backend, budget, say)
            if b["target_step_ms"]:
                res["backends"][d.backend] = b
    return res


def _gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        return None


def _parts(models) -> dict:
    return {
        n: {
            bs: {
                "target_step_ms": round(p.target_step, 4),
                "draft_step_ms": round(p.draft_step, 4),
                "extend_ms": round(p.extend, 4),
                "fit_rms_ms": p.residual_ms,
            }
            for bs, p in m.parts.items()
        }
        for n, m in models.items()
    }


def _best(grid: list[dict], measured: list[dict], concurrency: list[int]) -> dict:
    """Per band: the measured best where something was measured, else the model's best (marked predicted)."""

    got = best_per_band(measured)
    out = {}
    for c in concurrency:
        if c in got:
            r = got[c]
            out[c] = {
                **r["candidate"],
                "tokens_per_s": r["tokens_per_s"],
                "speedup": r["speedup"],
                "baseline_tokens_per_s": r["baseline_tokens_per_s"],
                "source": "measured",
            }
            continue
        rows = [r for r in grid if r["concurrency"] == c]
        top = max(rows, key=lambda r: r["tokens_per_s"])
        base = max((r for r in rows if r["steps"] == 0), key=lambda r: r["tokens_per_s"])
        out[c] = {
            "backend": top["backend"],
            "steps": top["steps"],
            "max_running": None,
            "tokens_per_s": top["tokens_per_s"],
            "speedup": top["tokens_per_s"] / base["tokens_per_s"],
            "baseline_tokens_per_s": base["tokens_per_s"],
            "source": "predicted",
        }
    return out


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def render(rep: dict) -> str:
    if rep.get("dry_run"):
        lines = [
            f"tune (dry run): {rep['target']} + {rep['draft']}, SGLang {rep['sglang']}, concurrency "
            f"{','.join(map(str, rep['concurrency']))}"
        ]
        lines += [
            f"  backend {d['backend']}: {'timed' if d['chosen'] else 'left out'} ({d['reason']})"
            for d in rep["backends"]
        ]
        tp = rep["timing_pass"]
        lines += [f"  timing pass: {tp}"] if isinstance(tp, str) else [f"  server: {c}" for c in tp["commands"]]
        bd = rep["budget"]
        lines.append(
            "  budget: "
            + (f"{bd['limit_gpu_min']:g} GPU min" if bd["limit_gpu_min"] is not None else "no limit (--budget-min)")
            + f"; one timing pass ~{bd['estimate_gpu_min_per_timing_pass']:g}, "
            f"everything ~{bd['estimate_gpu_min_all']:.0f}"
        )
        lines.append(f"  adaptive config: {'fitted' if rep['adaptive_config'] else 'not offered by this release'}")
        return "\n".join(lines + [f"  note: {n}" for n in rep["notes"]])
    a = rep["accept"]["by_steps"]
    lines = [
        f"tune: {rep['target']} + {rep['draft']} (SGLang {rep['sglang']})",
        "  accept length by steps (topk 1): " + "  ".join(f"{k}:{v:.2f}" for k, v in a.items()),
    ]
    for n, e in rep["model_error"].items():
        it, ee = e["iteration_in_sample"], e["tokens_per_s_end_to_end"]
        lines.append(
            f"  model {n}: iteration error {it.get('mean_abs', 0):.1%} mean |.| over {it['points']} points"
            + (f"; end to end {ee['mean_abs']:.1%} over {ee['points']}" if ee["points"] else "")
        )
    for c, b in sorted(rep["best"].items()):
        lines.append(
            f"  c={c}: {b['backend']} steps {b['steps']}"
            + (f" max-running {b['max_running']}" if b.get("max_running") else "")
            + f"  {b['tokens_per_s']:.0f} tok/s  {b['speedup'] or 0:.2f}x"
            f"  ({b['source']})"
        )
    for r in (rep.get("projection") or {}).get("rows", []):
        lines.append(
            f"  projected at 61 layers, TP 8, c={r['concurrency']}: {r['speedup']:.2f}x (dominant: {r['dominant']})"
        )
    lines += [f"  preset: {p}" for p in rep["presets"]]
    if rep["adaptive"].get("written"):
        lines.append(f"  adaptive config: {rep['adaptive']['path']}")
    bd = rep["budget"]
    lines.append(
        f"  spent: {bd['spent_gpu_min']} GPU min, {bd['servers_started']} server(s) started"
        + (f"; skipped: {'; '.join(bd['skipped'])}" if bd["skipped"] else "")
    )
    lines.append(f"  plot: {rep['plot']}")
    return "\n".join(lines)
