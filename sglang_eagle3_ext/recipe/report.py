"""The build's report: report.json (`--json` prints the same) and report.html. The dump's size, the training
curve (per epoch: loss and first-token accuracy), the draft's predicted accept length per position (eval), and
the commands that serve the draft."""

from __future__ import annotations

import html
import shlex
from pathlib import Path

from ..json_file import write_atomic, write_json
from ..server.started import eagle3_chain_args
from . import STAGES, state
from .digest import folder_id


def serve_preset(o) -> tuple[str | None, str]:
    """(preset, why) of the serve command: --serve-preset, else the dump preset's serving twin (NAME-dump ->
    NAME) when one is shipped, else none."""
    if o.serve_preset:
        return o.serve_preset, "--serve-preset"
    if o.preset and o.preset.endswith("-dump"):
        from ..launch.presets import available_presets

        twin = o.preset[: -len("-dump")]
        if twin in available_presets():
            return twin, f"the serving twin of the dump preset {o.preset}"
    return None, "no serving preset known (--serve-preset NAME names one)"


def serve_args(steps: int, draft: Path) -> list[str]:
    """SGLang's speculative flags for the draft in `draft`: its layout's algorithm (an EAGLE-3 chain of `steps`
    steps, or another algorithm, which takes its shape from the draft: DFlash its block); a draft whose layout is
    not known here is served as EAGLE-3."""
    import json

    from ..draft import arch as layouts

    try:
        cfg = json.loads((Path(draft) / "config.json").read_text())
    except (OSError, ValueError):
        cfg = None
    layout = layouts.find(cfg)
    algorithm = layout.ALGORITHM if layout is not None else "EAGLE3"
    if algorithm == "EAGLE3":
        return eagle3_chain_args(steps, draft)
    return ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(draft)]


def serve_commands(o, draft: Path) -> dict:
    steps = o.spec_steps
    spec = serve_args(steps, draft)
    preset, why = serve_preset(o)
    ours = ["sglang-eagle3", "launch", *(["--preset", preset] if preset else []), "--model-path", str(o.target), *spec]
    sglang = ["SGLANG_EAGLE3_EXT=1", "python", "-m", "sglang.launch_server", "--model-path", str(o.target), *spec]
    return {
        "launch": shlex.join(ours),
        "sglang": " ".join(shlex.quote(a) if "=" not in a else a for a in sglang),
        "preset": preset,
        "preset_why": why,
    }


def collect(run) -> dict:
    o = run.o
    exp = state.done(run.out, "export") or {}
    size = {k: exp[k] for k in ("dump_dir", "samples", "tokens", "bytes") if k in exp} or state.dump_size(o.dump_path)
    tr = state.done(run.out, "train") or {}
    ev = state.done(run.out, "eval") or {}
    return {
        "out": str(run.out),
        "target": str(o.target),
        "dump": size,
        "train": {k: tr.get(k) for k in ("steps", "epochs", "final_loss", "train_acc", "val")},
        "training_curve": tr.get("curve") or [],
        "predicted_accept_length": ev.get("predicted_accept_length"),
        "accept_per_position": ev.get("positions") or [],
        "spec_steps": o.spec_steps,
        **certification(run.out),
        "draft": str(run.out / "draft"),
        "serve": serve_commands(o, run.out / "draft"),
        "stage_seconds": {**{s: (state.done(run.out, s) or {}).get("seconds") for s in STAGES}, **run.seconds},
    }


def certification(out: Path) -> dict:
    """Whether the draft on disk now is the one check passed: its files hashed again and compared with the
    hash recorded when it was checked. {"check": bool, "draft_sha256": ..., "not_certified": why (if not)}."""
    rec = state.read(out, "check")
    if rec is None or rec["state"] != state.DONE or not rec["result"].get("ok"):
        return {"check": False, "draft_sha256": None, "not_certified": "the draft's check has not passed"}
    then, now = rec["inputs"].get("draft"), folder_id(Path(out) / "draft")
    sha = now.get("sha256") if isinstance(now, dict) else None
    if now != then:
        why = f"the draft in {Path(out) / 'draft'} changed after its check ({_what(then)} checked, {_what(now)} now)"
        return {"check": False, "draft_sha256": sha, "not_certified": why}
    return {"check": True, "draft_sha256": sha}


def _what(d) -> str:
    if not isinstance(d, dict):
        return str(d)
    return f"{d.get('files')} files, {d.get('bytes')} bytes, sha256 {str(d.get('sha256'))[:12]}"


def write_report(run) -> dict:
    rep = collect(run)
    write_json(run.out / "report.json", rep)
    write_atomic(run.out / "report.html", render_html(rep))
    return rep


def _f(v, spec=".3f") -> str:
    return "–" if v is None else format(v, spec)


def render_text(rep: dict) -> str:
    d = rep["dump"]
    lines = [
        f"build: draft in {rep['draft']}",
        "  check: "
        + (f"passed (the files on disk: sha256 {str(rep.get('draft_sha256'))[:12]})" if rep["check"] else "NOT passed")
        + (f"; {rep['not_certified']}" if rep.get("not_certified") else ""),
        f"  dump: {d.get('samples')} samples, {d.get('tokens')} tokens, {(d.get('bytes') or 0) / 1e9:.3f} GB",
        "  training: "
        + ", ".join(f"epoch {c['epoch']} loss {_f(c['loss'])} acc {_f(c['acc'])}" for c in rep["training_curve"][-3:]),
        f"  predicted accept length {_f(rep['predicted_accept_length'])} at {rep['spec_steps']} steps; per "
        f"position: " + ", ".join(_f(p) for p in rep["accept_per_position"]),
        f"  serve it: {rep['serve']['launch']}",
        f"  or with SGLang's own launcher: {rep['serve']['sglang']}",
    ]
    return "\n".join(lines)


def render_html(rep: dict) -> str:
    e = html.escape
    d = rep["dump"]
    curve = "".join(
        f"<tr><td>{c['epoch']}</td><td>{c['steps']}</td><td>{_f(c['loss'])}</td><td>{_f(c['acc'])}</td></tr>"
        for c in rep["training_curve"]
    )
    pos = "".join(f"<tr><td>{i + 1}</td><td>{_f(p)}</td></tr>" for i, p in enumerate(rep["accept_per_position"]))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>EAGLE-3 draft build</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td,th{{padding:.2em .8em;text-align:right}}
pre{{background:#f4f4f4;padding:1em;white-space:pre-wrap}}</style></head><body>
<h1>EAGLE-3 draft for {e(rep["target"])}</h1>
<p>Draft: <code>{e(rep["draft"])}</code> (check: {"passed" if rep["check"] else "not passed"})
{e(rep.get("not_certified") or "")}</p>
<h2>Dump</h2><p>{d.get("samples")} samples, {d.get("tokens")} tokens, {(d.get("bytes") or 0) / 1e9:.3f} GB in
<code>{e(str(d.get("dump_dir")))}</code></p>
<h2>Training curve</h2><table><tr><th>epoch</th><th>steps</th><th>loss</th><th>accuracy (token 1)</th></tr>{curve}</table>
<h2>Predicted accept length</h2><p>{_f(rep["predicted_accept_length"])} at {rep["spec_steps"]} draft steps (topk 1)</p>
<table><tr><th>draft position</th><th>P(accepted | earlier accepted)</th></tr>{pos}</table>
<h2>Serve it</h2><pre>{e(rep["serve"]["launch"])}</pre><p>or with SGLang's own launcher:</p>
<pre>{e(rep["serve"]["sglang"])}</pre><p>preset: {e(str(rep["serve"]["preset"]))} ({e(rep["serve"]["preset_why"])})</p>
</body></html>
"""
