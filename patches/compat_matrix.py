#!/usr/bin/env python3
"""Compatibility matrix on CPU: every supported SGLang release x what this package needs of it.

One venv (built by .ci/setup_venv.sh), each release synced in place from its lock (constraints/sglang-X.txt,
`.ci/lockenv.py sync`: exactly the lock's packages, the CPU stand-ins it needs; uv's cache makes a swap take
seconds). Per release:

  install    the lock synced, and the environment is exactly the lock (`lockenv.py check`, metadata only; the
             pytest cells check the suite's imports before collecting)
  launch     `launch --preset tiny-dump --dry-run` validates the preset against the release's ServerArgs, and
             `launch --model-path ... --tp-size 8 --dry-run` plans
  targets    `python -m sglang_eagle3_ext.compat` on the installed release (static, no import)
  patch      patches/<release>/*.patch is what make_patches.py generates today, applies with
             `patch --dry-run` to the wheel's source, and the patched files py_compile
  baked      the patch applied in site-packages: importing SGLang gives exactly the runtime
             wrappers (marked, so apply() is a no-op); then reverted (`patch -R`)
  runtime    tests/sglang_cpu/test_patch_registry.py (every target resolves, applies, reverts)
  loader     tests/sglang_cpu/test_draft_loader.py -k 'speculators or specforge', test_draft_mla_loader.py
  dump       tests/sglang_cpu/test_dump_hook.py

A release that cannot be installed is a failure, not a skip; exit status 1 if any cell failed.
The release installed in the venv at the start is run last, so the venv ends as it began.

    python patches/compat_matrix.py --venv /work/venv_matrix [--releases 0.5.16,0.5.23]
        [--wheel-dir DIR] [--update-readme] [--json out.json] [--budget-s 900]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import make_patches  # noqa: E402
from make_patches import RELEASES  # noqa: E402

from sglang_eagle3_ext.compat import release as compat  # noqa: E402

LOCKENV = REPO / ".ci" / "lockenv.py"

COLUMNS = ["install", "launch", "targets", "patch", "baked", "runtime", "loader", "dump"]
README = REPO / "README.md"
START, END = "<!-- compat-matrix:start -->", "<!-- compat-matrix:end -->"
PYTEST_K = (
    "test_patch_registry or test_dump_hook or speculators or specforge or mla or through_the_wrapper "
    "or inside_the_wrapper or server_args_fields"
)
# more files counted in a column: the MLA (Kimi-K2.5) draft loader runs in the loader column
# and the Kimi-K2.5 wrapper's capture hook (the language model inside it is the target) in the dump column
EXTRA_FILES = {
    "tests/sglang_cpu/test_draft_mla_loader.py": "loader",
    "tests/sglang_cpu/test_mla_draft_equiv.py": "loader",
    "tests/sglang_cpu/test_tiny_kimi.py": "dump",
    # the release's ServerArgs read through the adapter (dataclass or msgspec struct)
    "tests/sglang_cpu/test_server_args_fields.py": "runtime",
}
PYTEST_FILES = {
    "runtime": "tests/sglang_cpu/test_patch_registry.py",
    "loader": "tests/sglang_cpu/test_draft_loader.py",
    "dump": "tests/sglang_cpu/test_dump_hook.py",
}


def run(cmd, timeout=600, stdout_only=False, **kw):
    """(exit status, stdout + stderr); stdout_only: stdout alone (a JSON report; stderr has the library chatter)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        return p.returncode, (p.stdout or "") + ("" if stdout_only else (p.stderr or ""))
    except subprocess.TimeoutExpired as e:
        return 124, f"timed out after {timeout}s: {' '.join(map(str, cmd))}\n{e.stdout or ''}"


def last_line(out: str, pattern: str | None = None) -> str:
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    if pattern:
        hits = [ln for ln in lines if re.search(pattern, ln)]
        lines = hits or lines
    return (lines[-1] if lines else "")[:300]


class Venv:
    def __init__(self, path: Path):
        self.path = path
        self.python = str(path / "bin" / "python")
        rc, out = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        if rc:
            raise SystemExit(f"not a usable venv: {path}: {out}")
        self.site = Path(out.strip().splitlines()[-1])

    def installed_sglang(self) -> str | None:
        rc, out = run([self.python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"])
        return out.strip().splitlines()[-1] if rc == 0 else None


def locked_env(version: str) -> dict:
    """The environment of a command run in the synced venv: the pytest cells check it against the lock first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    env["SGE3_LOCKED_RELEASE"] = version
    return env


def cell_install(venv: Venv, version: str, wheel_dirs, res: dict) -> Path | None:
    rc, out = run([sys.executable, str(LOCKENV), "sync", str(venv.path), version], timeout=900)
    if rc:
        res["install"] = ("FAIL", f"lockenv sync {version}: {last_line(out, 'lockenv|rror')}")
        return None
    rc, out = run([venv.python, str(LOCKENV), "check", version, "--no-imports"], timeout=300)
    if rc:
        res["install"] = ("FAIL", last_line(out, "^environment"))
        return None
    try:
        wheel = compat.find_wheel(version, [*wheel_dirs, compat.cache_dir() / "wheels"]) or compat.download_wheel(
            version, compat.cache_dir() / "wheels", python=venv.python
        )
    except compat.ReleaseUnavailable as e:
        res["install"] = ("FAIL", f"the wheel for the patch cells: {e}")
        return None
    res["install"] = ("ok", f"constraints/sglang-{version}.txt ({RELEASES[version]} transformers), exactly")
    return wheel


def cell_launch(venv: Venv, version: str, res: dict):
    """The README's first-run preset, validated by a dry run, and a plan for a model path at TP 8."""
    cli = [venv.python, "-m", "sglang_eagle3_ext", "launch"]
    with tempfile.TemporaryDirectory() as d:
        rc, out = run(
            [*cli, "--preset", "tiny-dump", "--dry-run", "--json", "-"],
            timeout=300,
            cwd=d,
            env=locked_env(version),
            stdout_only=True,
        )
        note = _plan_note(out)
        if rc or f"sglang: {version} (flags and presets checked" not in note:
            _, why = run([*cli, "--preset", "tiny-dump", "--dry-run"], timeout=300, cwd=d, env=locked_env(version))
            res["launch"] = ("FAIL", f"--preset tiny-dump --dry-run: rc={rc} {note or last_line(why, 'error')}")
            return
        rc, out = run(
            [*cli, "--model-path", str(Path(d) / "model"), "--tp-size", "8", "--dry-run", "--json", "-"],
            timeout=300,
            cwd=d,
            env=locked_env(version),
            stdout_only=True,
        )
        if rc or _plan_field(out, "tp_size") != 8:
            res["launch"] = ("FAIL", f"--model-path --tp-size 8 --dry-run: rc={rc} {last_line(out)}")
            return
    res["launch"] = ("ok", note)


def _plan_field(out: str, key: str):
    try:
        return json.loads(out[out.index("{") :])[key]
    except (ValueError, KeyError):
        return None


def _plan_note(out: str) -> str:
    return _plan_field(out, "sglang_note") or ""


def cell_targets(venv: Venv, version: str, res: dict):
    rc, out = run([venv.python, "-m", "sglang_eagle3_ext.compat"], timeout=120)
    res["targets"] = ("ok" if rc == 0 else "FAIL", last_line(out, r"^(supported|unsupported|error)"))


def cell_patch(version: str, wheel: Path, res: dict):
    patch_file = make_patches.patch_path(version)
    if not patch_file.exists():
        res["patch"] = ("FAIL", f"no {patch_file.relative_to(REPO)}")
        return
    try:
        src = compat.unpack_wheel(wheel, compat.cache_dir() / "src" / wheel.stem)
        fresh = make_patches.render(src, version)
    except Exception as e:  # noqa: BLE001 - reported as the cell's failure
        res["patch"] = ("FAIL", f"make_patches: {e}")
        return
    if fresh != patch_file.read_text():
        res["patch"] = ("FAIL", f"{patch_file.relative_to(REPO)} is stale: run patches/make_patches.py")
        return
    rc, out = run(["patch", "-p1", "--dry-run", "--fuzz=0", "--batch", "-d", str(src.parent), "-i", str(patch_file)])
    if rc:
        res["patch"] = ("FAIL", f"patch --dry-run: {last_line(out)}")
        return
    files = sorted(set(re.findall(r"^\+\+\+ b/(\S+)", fresh, re.M)))
    with tempfile.TemporaryDirectory() as d:
        for rel in files:
            (Path(d) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src.parent / rel, Path(d) / rel)
        rc, out = run(["patch", "-p1", "--fuzz=0", "--batch", "-d", d, "-i", str(patch_file)])
        if rc:
            res["patch"] = ("FAIL", f"patch: {last_line(out)}")
            return
        for rel in files:
            try:
                py_compile.compile(str(Path(d) / rel), doraise=True, cfile=str(Path(d) / (rel + "c")))
            except py_compile.PyCompileError as e:
                res["patch"] = ("FAIL", f"py_compile {rel}: {e.msg.strip().splitlines()[-1]}")
                return
    res["patch"] = ("ok", f"{len(files)} files, applies to the wheel source and compiles")


BAKED_CHECK = r"""
import importlib, sys, wrapt
from sglang_eagle3_ext import patching, static_patch
import sglang_eagle3_ext as ext
ROWS = patching.selected({"draft", "dump"})   # the rows this release's capabilities allow
for spec in ROWS:
    owner, attr = patching.resolve_target(spec)
    cur = owner.__dict__[attr]
    assert isinstance(cur, wrapt.FunctionWrapper), f"{spec.target} is not wrapped"
    assert getattr(cur, patching.PATCH_MARK) == spec.name, f"{spec.target} marked {getattr(cur, patching.PATCH_MARK, None)}"
    want = patching.import_string(spec.wrapper)
    assert cur._self_wrapper is want, f"{spec.target} wrapped by {cur._self_wrapper}, not {spec.wrapper}"
assert sorted(static_patch.applied()) == sorted(s.name for s in ROWS), static_patch.applied()
assert ext.apply({"draft", "dump"}) == [], "runtime apply wrapped a baked target a second time"
print("baked: %d targets wrapped by the runtime wrappers; apply() is a no-op" % len(ROWS))
"""


def cell_baked(venv: Venv, version: str, res: dict):
    patch_file = make_patches.patch_path(version)
    if not patch_file.exists():
        res["baked"] = ("FAIL", "no patch")
        return
    rc, out = run(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "-d", str(venv.site), "-i", str(patch_file)])
    if rc:
        res["baked"] = ("FAIL", f"patch in site-packages: {last_line(out)}")
        run(["patch", "-p1", "-R", "--batch", "-d", str(venv.site), "-i", str(patch_file)])
        return
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
        with tempfile.TemporaryDirectory() as d:
            env["SGLANG_EAGLE3_EXT_DUMP_DIR"] = d  # so the dump patches are on at import too
            # importing the targets' modules is done by resolve_target (importlib), like SGLang would
            rc, out = run([venv.python, "-c", BAKED_CHECK], timeout=300, env=env, cwd=d)
        res["baked"] = ("ok" if rc == 0 else "FAIL", last_line(out, r"^(baked|AssertionError|\w+Error)"))
    finally:
        rc2, out2 = run(["patch", "-p1", "-R", "--batch", "-d", str(venv.site), "-i", str(patch_file)])
        if rc2:
            res["baked"] = ("FAIL", f"could not revert the patch in {venv.site}: {last_line(out2)}")


def cells_pytest(venv: Venv, version: str, res: dict):
    with tempfile.TemporaryDirectory() as d:
        xml = Path(d) / "junit.xml"
        cmd = [
            venv.python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            PYTEST_K,
            f"--junitxml={xml}",
            *PYTEST_FILES.values(),
            *EXTRA_FILES,
        ]
        rc, out = run(cmd, timeout=600, cwd=REPO, env=locked_env(version))
        counts = {c: {"passed": 0, "failed": 0, "skipped": 0, "first": ""} for c in PYTEST_FILES}
        if xml.exists():
            for tc in ET.parse(xml).getroot().iter("testcase"):
                cls = tc.get("classname", "")
                col = next((c for c, f in PYTEST_FILES.items() if Path(f).stem in cls), None) or next(
                    (c for f, c in EXTRA_FILES.items() if Path(f).stem in cls), None
                )
                if col is None:
                    continue
                bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
                if bad is not None:
                    counts[col]["failed"] += 1
                    said = (bad.get("message") or "").strip().splitlines()
                    counts[col]["first"] = counts[col]["first"] or f"{tc.get('name')}: {said[0][:200] if said else ''}"
                elif tc.find("skipped") is not None:
                    counts[col]["skipped"] += 1
                    counts[col]["first"] = (
                        counts[col]["first"] or f"skipped: {tc.find('skipped').get('message', '')[:200]}"
                    )
                else:
                    counts[col]["passed"] += 1
    for col, c in counts.items():
        n = c["passed"] + c["failed"] + c["skipped"]
        if n == 0:
            res[col] = ("FAIL", f"no tests ran (pytest rc={rc}: {last_line(out)})")
        elif c["failed"] or not c["passed"]:
            res[col] = ("FAIL", f"{c['passed']}/{n} passed; {c['first']}")
        else:  # skips are a release lacking a capability (e.g. no MLA draft class before 0.5.14): said, not failed
            res[col] = (
                "ok",
                f"{c['passed']}/{n} passed" + (f", {c['skipped']} skipped ({c['first']})" if c["skipped"] else ""),
            )


def run_release(venv: Venv, version: str, wheel_dirs) -> dict:
    t0 = time.monotonic()
    res: dict = {"release": version, "transformers": RELEASES.get(version, "?")}
    wheel = cell_install(venv, version, wheel_dirs, res)
    if wheel is None:
        for c in COLUMNS[1:]:
            res[c] = ("FAIL", "not installed")
    else:
        cell_launch(venv, version, res)
        cell_targets(venv, version, res)
        cell_patch(version, wheel, res)
        cells_pytest(venv, version, res)
        cell_baked(venv, version, res)
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def ok(res: dict) -> bool:
    return all(res.get(c, ("FAIL",))[0] == "ok" for c in COLUMNS)


def table(results: list[dict]) -> str:
    hdr = ["SGLang", "transformers", *COLUMNS, "s"]
    rows = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in results:
        cells = (
            [r["release"], r["transformers"]]
            + ["✅" if r[c][0] == "ok" else "❌" for c in COLUMNS]
            + [str(r["seconds"])]
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def failures(results) -> list[str]:
    return [f"{r['release']} {c}: {r[c][1]}" for r in results for c in COLUMNS if r[c][0] != "ok"]


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
        "(the Kimi-K2.5 wrapper's capture hook)."
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_venv = sys.prefix if sys.prefix != sys.base_prefix else None
    ap.add_argument("--venv", default=default_venv, help="venv from .ci/setup_venv.sh (default: the running one)")
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--wheel-dir", action="append", default=[], help="where sglang-X-*.whl may already be")
    ap.add_argument("--update-readme", action="store_true", help="write the table between the README markers")
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--budget-s", type=float, default=900, help="fail releases not started within this (default 900)")
    a = ap.parse_args(argv)
    if not a.venv:
        ap.error("--venv is required when not run from a venv")
    venv = Venv(Path(a.venv).absolute())  # absolute: some steps run with another cwd
    wanted = [v for v in a.releases.split(",") if v]
    unknown = [v for v in wanted if v not in RELEASES]
    if unknown:
        ap.error(f"not supported releases: {unknown} (known: {', '.join(RELEASES)})")
    start_release = venv.installed_sglang()
    order = [v for v in wanted if v != start_release] + [v for v in wanted if v == start_release]
    t0 = time.monotonic()
    by_version = {}
    for v in order:
        if time.monotonic() - t0 > a.budget_s:
            by_version[v] = {
                "release": v,
                "transformers": RELEASES[v],
                "seconds": 0,
                **{c: ("FAIL", f"matrix budget {a.budget_s:.0f}s exhausted") for c in COLUMNS},
            }
            continue
        r = run_release(venv, v, a.wheel_dir)
        by_version[v] = r
        print(
            f"{v}: {'ok' if ok(r) else 'FAIL'} ({r['seconds']} s) " + "  ".join(f"{c}={r[c][0]}" for c in COLUMNS),
            flush=True,
        )
    total = time.monotonic() - t0
    results = [by_version[v] for v in wanted]
    print("\n" + table(results))
    bad = failures(results)
    for b in bad:
        print("FAIL " + b)
    print(f"\nmatrix: {len(wanted) - len({b.split()[0] for b in bad})}/{len(wanted)} releases pass, {total:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"seconds": total, "results": results}, indent=1))
    if a.update_readme:
        update_readme(results, total)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
