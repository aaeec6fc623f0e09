"""What tune gives the user from the fitted cost models and the best settings per band: SGLang's adaptive config,
the launch presets, the projection to a large target, the plot. `o` below is the run's tune.options.TuneOptions."""

from __future__ import annotations

from pathlib import Path

from . import adaptive, plot, preset
from .costmodel import interp
from .flags import EAGLE_DEFAULT_MAX_RUNNING, eagle_max_running
from .projection import ASSUMPTIONS, project

EAGLE3_DEFAULT_STEPS = 3


def server_backend(best: dict) -> str:
    """The backend one server for every band uses: the one best most often (ties: the smallest band's)."""
    votes: dict[str, int] = {}
    for c in sorted(best):
        votes[best[c]["backend"]] = votes.get(best[c]["backend"], 0) + 1
    return max(votes, key=lambda b: (votes[b], -min(c for c in best if best[c]["backend"] == b)))


def write_adaptive(o, rep: dict, models, accept, out: Path) -> dict:
    """SGLang's adaptive config fitted with the one server backend's model (adaptive_config.json); the report's
    entry. Steps 0 is priced as an adaptive server runs it (costmodel: the draft extend still runs). The server's
    --speculative-num-steps must be one of the config's candidate steps (SGLang refuses to start otherwise): the
    smallest band's best, else the least a busier band speculates; none written where no band speculates."""
    backend = server_backend(rep["best"])
    m = models.get(backend) or next(iter(models.values()))
    predicted = {
        c: {s: m.tokens_per_s(c, s, accept, adaptive=True) for s in [0, *accept] if s < 8} for c in o.concurrency
    }
    best_steps = {c: max(p, key=p.get) for c, p in predicted.items()}
    speculating = [best_steps[c] for c in sorted(best_steps) if best_steps[c]]
    if not speculating:
        return {
            "written": False,
            "why": "no band is predicted faster with speculation on an adaptive server; the presets per band serve",
            "best_steps_by_band": best_steps,
        }
    initial = best_steps[min(best_steps)] or min(speculating)
    cfg = adaptive.fit_config(best_steps, predicted, accept, initial)
    path = adaptive.write(out / "adaptive_config.json", cfg)
    return {
        "written": True,
        "path": str(path),
        "backend": m.name,
        "initial_steps": initial,
        "config": cfg,
        "best_steps_by_band": best_steps,
        "default_config_settles": adaptive.default_settles(accept),
    }


def write_presets(o, rep: dict, out: Path) -> list[str]:
    """A launch preset per band (tuned-c<c>.yaml), and one for every band with the adaptive config (tuned.yaml)
    when it was written; their paths."""
    written = []
    figures = [
        f"concurrency {c}: {b['backend']} steps {b['steps']}"
        + (f" max-running {b['max_running']}" if b.get("max_running") else "")
        + f": {b['tokens_per_s']:.0f} tok/s, {b['speedup'] or 0:.2f}x "
        f"({b['source']})"
        for c, b in sorted(rep["best"].items())
    ]
    for c, b in sorted(rep["best"].items()):
        running = b.get("max_running") or (eagle_max_running(c) if b["steps"] else None)
        f = preset.server_fields(o.target, o.draft, b["backend"], b["steps"], running)
        h = preset.header(
            f"Tuned for concurrency {c} (the band from {c} up to the next level tuned)",
            o.command,
            figures,
            [_running_note(running)] if running and not b.get("max_running") else [],
        )
        written.append(str(preset.write(out / f"tuned-c{c}.yaml", f, h)))
    ad = rep.get("adaptive") or {}
    if ad.get("written"):
        running = eagle_max_running(max(rep["best"]))
        f = preset.server_fields(
            o.target,
            o.draft,
            ad["backend"],
            ad["initial_steps"],
            running,
            adaptive_config=str(Path(ad["path"]).resolve()),
        )
        h = preset.header(
            "Tuned for every band at once: --speculative-adaptive with the fitted config",
            o.command,
            figures,
            [
                "adaptive bands (batch size: candidate steps): "
                + ", ".join(f"{k}: {v['candidate_steps']}" for k, v in ad["config"].items())
            ]
            + ([_running_note(running)] if running else []),
        )
        written.append(str(preset.write(out / "tuned.yaml", f, h)))
    return written


def _running_note(running: int) -> str:
    return (
        f"max_running_requests {running}: SGLang runs an EAGLE server at most {EAGLE_DEFAULT_MAX_RUNNING} "
        f"requests at once unless told, and this band runs {running}"
    )


def project_best(models, accept, best, shape, from_tp: int = 1) -> dict:
    """Each band's best projected to a large target (tune/projection.py) from the TP it was timed at, or why
    not."""
    if not all(shape.get(k) for k in ("layers", "vocab", "hidden")):
        return {"why_not": "the target's config lacks num_hidden_layers / vocab_size / hidden_size"}
    rows = []
    for c, b in sorted(best.items()):
        m = models.get(b["backend"])
        s = b["steps"] or EAGLE3_DEFAULT_STEPS
        if m is None or s not in accept:
            continue
        p = m.part(c)
        rows.append(
            {
                "concurrency": c,
                "backend": m.name,
                "steps": s,
                **project(
                    p.target_step,
                    costmodel_verify(m, c, s),
                    p.draft_step,
                    p.extend,
                    s,
                    accept[s],
                    shape["layers"],
                    shape["vocab"],
                    shape["hidden"],
                    from_tp=from_tp,
                ),
            }
        )
    return {"rows": rows, "assumptions": ASSUMPTIONS, "from_layers": shape["layers"], "from_tp": from_tp}


def costmodel_verify(m, bs: int, steps: int) -> float:
    """The fitted target step for verifying `steps` drafts of `bs` requests (bs x (steps + 1) tokens)."""
    return interp(m.target_steps, bs * (steps + 1))


def write_plot(rep: dict, models, accept, out: Path):
    """tokens/s vs concurrency: tuned, SGLang's adaptive defaults, EAGLE-3 defaults, no speculation; its path."""
    cs = rep["concurrency"]
    backend = server_backend(rep["best"])
    m = models.get(backend) or next(iter(models.values()))
    series = {"tuned": {c: rep["best"][c]["tokens_per_s"] for c in cs}}
    settles = adaptive.default_settles(accept)
    if settles:
        keys = list(settles)
        series["adaptive defaults (predicted)"] = {
            c: sum(m.tokens_per_s(c, s, accept, adaptive=True) for s in settles[adaptive.slot_for(c, keys)])
            / len(settles[adaptive.slot_for(c, keys)])
            for c in cs
        }
    series[f"EAGLE-3 defaults, steps {EAGLE3_DEFAULT_STEPS} (predicted)"] = {
        c: m.tokens_per_s(c, EAGLE3_DEFAULT_STEPS, accept) for c in cs
    }
    series["no speculation"] = {c: rep["best"][c]["baseline_tokens_per_s"] or m.tokens_per_s(c, 0, accept) for c in cs}
    return plot.write(out, series)
