"""The compatibility matrix's report: the table, the failures, the README section (patches/compat_matrix.py)."""

from __future__ import annotations

import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLUMNS = ["install", "launch", "targets", "patch", "baked", "runtime", "loader", "dump", "dflash"]
# a column a release may lack the feature of (no DFLASH before 0.5.14): "n/a" there, shown as a dash, not a failure
OPTIONAL = {"dflash"}
MARK = {"ok": "✅", "n/a": "—"}
README = REPO / "README.md"
START, END = "<!-- compat-matrix:start -->", "<!-- compat-matrix:end -->"


def ok(res: dict) -> bool:
    return all(res.get(c, ("FAIL",))[0] in ("ok", "n/a") for c in COLUMNS)


def table(results: list[dict]) -> str:
    hdr = ["SGLang", "transformers", *COLUMNS, "s"]
    rows = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in results:
        cells = (
            [r["release"], r["transformers"]]
            + [MARK.get(r.get(c, ("FAIL",))[0], "❌") for c in COLUMNS]
            + [str(r["seconds"])]
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def failures(results) -> list[str]:
    return [f"{r['release']} {c}: {r[c][1]}" for r in results for c in COLUMNS if r[c][0] not in ("ok", "n/a")]


def update_readme(results, total_s: float, path: Path = README) -> None:
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path}: markers {START} / {END} not found")
    legend = (
        "Columns: **install** the release's lock (`constraints/sglang-X.txt`) synced, the environment exactly "
        "the lock; **launch** `launch --preset tiny-dump --dry-run` validates the preset against the release's "
        "server arguments, and a TP-8 plan for a model path; **targets** `python -m sglang_eagle3_ext.compat` "
        "(static); **patch** `patches/<release>/` is current, applies (`patch --dry-run`) and compiles; "
        "**baked** that patch installed: SGLang's methods carry the runtime wrappers; **runtime** "
        "`test_patch_registry.py`; **loader** `test_draft_loader.py -k 'speculators or specforge'` + "
        "`test_draft_mla_loader.py` + `test_mla_draft_equiv.py` (MLA drafts, Kimi-K2.5); **dump** "
        "`test_dump_hook.py` + `test_tiny_kimi.py -k 'through_the_wrapper or inside_the_wrapper'` "
        "(the Kimi-K2.5 wrapper's capture hook); **dflash** `test_dflash_loader.py`: SGLang's own "
        "`DFlashDraftModel` loads a converted DFlash draft strictly and refuses malformed ones (— where the release "
        "has no DFLASH)."
    )
    when = datetime.date.today().isoformat()
    body = (
        f"\nCompatibility matrix (CPU, measured {when} by `python patches/compat_matrix.py --update-readme`, "
        f"{total_s / 60:.1f} min):\n\n{table(results)}\n\n{legend}\n"
    )
    bad = failures(results)
    if bad:
        body += "\nFailures:\n\n" + "\n".join(f"- {b}" for b in bad) + "\n"
    pre, rest = text.split(START, 1)
    _, post = rest.split(END, 1)
    path.write_text(pre + START + body + END + post)
