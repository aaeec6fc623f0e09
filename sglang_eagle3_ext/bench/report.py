"""A benchmark result as text (`render`: the table `bench` prints) and as `bench --report PATH` (`write_report`):
one self-contained HTML file (tables + plots as embedded PNGs), the PNGs beside it.

Plots (matplotlib, optional: without it the report has the tables and says what to install):
  acceptance  P(draft token k accepted) per position k, one line per concurrency level
  throughput  output tokens/s per concurrency level, speculative vs baseline, with the speedup written on
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path


def _plots(res: dict) -> dict[str, bytes]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    import io

    out = {}
    levels = res["levels"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = False
    for lv in levels:
        pa = lv["spec"]["position_acceptance"]
        if pa:
            ax.plot(range(1, len(pa) + 1), pa, marker="o", label=f"concurrency {lv['concurrency']}")
            drawn = True
    if drawn:
        ax.set(
            xlabel="draft token position",
            ylabel="P(accepted)",
            ylim=(0, 1.02),
            title="How often draft token k is accepted",
        )
        ax.set_xticks(range(1, max(len(lv["spec"]["position_acceptance"]) for lv in levels) + 1))
        ax.grid(alpha=0.3)
        ax.legend()
        out["acceptance"] = _png(fig, io)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = list(range(len(levels)))
    has_base = any(lv["baseline"] for lv in levels)
    w = 0.38 if has_base else 0.6
    spec = [lv["spec"]["tokens_per_s"] for lv in levels]
    ax.bar([x - (w / 2 if has_base else 0) for x in xs], spec, w, label="speculative")
    if has_base:
        base = [lv["baseline"]["tokens_per_s"] if lv["baseline"] else 0 for lv in levels]
        ax.bar([x + w / 2 for x in xs], base, w, label="baseline")
        for x, lv in zip(xs, levels):
            if lv.get("speedup") is not None:
                ax.annotate(
                    f"{lv['speedup']:.2f}x",
                    (x, max(spec[x], base[x])),
                    ha="center",
                    va="bottom",
                    color="C3" if lv["speedup"] < 1 else "black",
                )
    ax.set_xticks(xs, [str(lv["concurrency"]) for lv in levels])
    ax.set(xlabel="concurrency", ylabel="output tokens/s", title="Throughput")
    ax.margins(y=0.15)
    ax.legend()
    out["throughput"] = _png(fig, io)
    plt.close(fig)
    return out


def _png(fig, io) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _table(res: dict) -> str:
    head = (
        "concurrency",
        "server",
        "requests",
        "output tokens",
        "tokens/s",
        "accept length",
        "accept rate",
        "P(accepted) per draft position",
        "speedup",
    )
    rows = []
    for lv in res["levels"]:
        for r in filter(None, (lv["spec"], lv["baseline"])):
            fmt = lambda v, f: format(v, f) if isinstance(v, (int, float)) else ""  # noqa: E731
            spd = fmt(lv.get("speedup"), ".2f") + "x" if r is lv["spec"] and lv.get("speedup") is not None else ""
            cells = (
                lv["concurrency"],
                r["label"],
                r["requests"],
                r["output_tokens"],
                fmt(r["tokens_per_s"], ".1f"),
                fmt(r["accept_length"], ".3f"),
                fmt(r["accept_rate"], ".3f"),
                " ".join(f"{p:.3f}" for p in r["position_acceptance"]),
                spd,
            )
            rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def write_report(path: str, res: dict) -> list[Path]:
    """Write PATH (HTML) and PATH's stem + _NAME.png per plot; returns the files written."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    plots = _plots(res)
    written = []
    for name, png in plots.items():
        p = dest.with_name(f"{dest.stem}_{name}.png")
        p.write_bytes(png)
        written.append(p)
    status_color = {"OK": "#1a7f37", "WARNING": "#9a6700", "FAIL": "#cf222e"}.get(res["status"], "black")
    imgs = (
        "".join(
            f'<h2>{n}</h2><img alt="{n}" src="data:image/png;base64,{base64.b64encode(b).decode()}">'
            for n, b in plots.items()
        )
        or "<p>(no plots: pip install matplotlib)</p>"
    )
    meta = {
        k: res[k] for k in ("spec_url", "baseline_url", "server", "prompts", "max_new_tokens", "created", "version")
    }
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>sglang-eagle3 bench</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} pre{{background:#f6f8fa;padding:8px}}</style></head>
<body><h1>EAGLE-3 acceptance benchmark</h1>
<p style="color:{status_color};font-weight:bold">{"<br>".join(html.escape(v) for v in res["verdict_lines"])}</p>
{_table(res)}{imgs}<h2>run</h2><pre>{html.escape(json.dumps(meta, indent=2, default=str))}</pre></body></html>
"""
    dest.write_text(doc)
    return [dest, *written]


def render(res: dict) -> str:
    """The result as the text table `bench` prints: one row per server and level, then the verdict."""
    f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "n/a"  # noqa: E731
    rows = [
        f"{'conc':>4} {'server':11} {'req':>5} {'out tok':>8} {'tok/s':>9} {'accept len':>10} {'accept rate':>11} "
        f"{'speedup':>8}"
    ]
    for lv in res["levels"]:
        for r in filter(None, (lv["spec"], lv["baseline"])):
            spd = f(lv.get("speedup"), ".2f") + "x" if r is lv["spec"] and lv.get("speedup") is not None else ""
            rows.append(
                f"{lv['concurrency']:>4} {r['label']:11} {r['requests']:>5} {r['output_tokens']:>8} "
                f"{r['tokens_per_s']:>9.1f} {f(r['accept_length'], '.3f'):>10} {f(r['accept_rate'], '.3f'):>11} "
                f"{spd:>8}"
            )
        pa = lv["spec"]["position_acceptance"]
        if pa:
            rows.append(
                f"     draft token accepted (c={lv['concurrency']}): "
                + "  ".join(f"#{k} {p:.3f}" for k, p in enumerate(pa, 1))
            )
        for label, st in (lv.get("steps") or {}).items():
            rows.append(
                f"     {label} log (c={lv['concurrency']}): "
                + (
                    st["error"]
                    if "error" in st
                    else f"iteration {st['iteration_ms']:.1f} ms, admission {f(st.get('admission_ms'), '.1f')} ms per "
                    f"prefill batch x {st.get('prefill_batches', 0)}, "
                    f"{f(st.get('admission_share'), '.0%')} of the time"
                )
            )
    notes = [
        f"prompts: {res['prompts']['source']}, new tokens per request: {res['max_new_tokens']}"
        + (f" (mean {res['new_tokens_mean']:.0f})" if isinstance(res["max_new_tokens"], str) else "")
    ]
    notes += [f"note: {n}" for n in res["prompts"]["notes"]]
    return "\n".join(notes + rows + res["verdict_lines"])
