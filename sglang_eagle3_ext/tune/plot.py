"""tokens/s vs concurrency: tuned, SGLang's adaptive defaults, EAGLE-3 defaults, no speculation (matplotlib when
installed, else an SVG written here). series: {label: {concurrency: tokens/s}}."""

from __future__ import annotations

from pathlib import Path

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#d62728")


def write(out_dir, series: dict[str, dict[int, float]]) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _svg(Path(out_dir) / "tune.svg", series)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for (label, pts), color in zip(series.items(), COLORS):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], marker="o", label=label, color=color)
    ax.set(xscale="log", xlabel="concurrency", ylabel="output tokens/s", title="sglang-eagle3 tune")
    ax.grid(alpha=0.3)
    ax.legend()
    p = Path(out_dir) / "tune.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _svg(path: Path, series: dict[str, dict[int, float]]) -> Path:
    import math

    w, h, m = 640, 400, 60
    xs = sorted({x for pts in series.values() for x in pts}) or [1]
    ymax = max((v for pts in series.values() for v in pts.values()), default=1.0) * 1.1 or 1.0
    lx = [math.log2(x) for x in xs]
    span = (max(lx) - min(lx)) or 1.0
    px = lambda x: m + (math.log2(x) - min(lx)) / span * (w - 2 * m)  # noqa: E731
    py = lambda y: h - m - y / ymax * (h - 2 * m)  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
        f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>',
        f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
        f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
        f'<text x="{w / 2}" y="{h - 15}" text-anchor="middle">concurrency</text>',
        f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">output tokens/s</text>',
    ]
    for x in xs:
        parts.append(f'<text x="{px(x):.1f}" y="{h - m + 16}" text-anchor="middle">{x}</text>')
    for i in range(5):
        y = ymax * i / 4
        parts.append(f'<text x="{m - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
    for k, ((label, pts), color) in enumerate(zip(series.items(), COLORS)):
        coords = " ".join(f"{px(x):.1f},{py(pts[x]):.1f}" for x in sorted(pts))
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(pts[x]):.1f}" r="3" fill="{color}"/>' for x in sorted(pts)]
        parts.append(f'<text x="{m + 10}" y="{m + 14 * k}" fill="{color}">{_esc(label)}</text>')
    path.write_text("\n".join(parts + ["</svg>"]) + "\n")
    return path


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
