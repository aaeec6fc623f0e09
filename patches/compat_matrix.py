#!/usr/bin/env python3
"""Compatibility matrix on CPU: every supported SGLang release x what this package needs of it.

Each release runs in a venv of its own, .ci/cache/venv-X, exactly its lock (matrix_venvs.py): no other environment
is installed into or patched, so `.venv` ends as it began whatever stops the matrix. A release whose inputs are
those of its last passing run is reused from .ci/cache/passed.json (`--rerun`: run it anyway). Per release:

  install    venv-X synced, and exactly the lock (`lockenv.py check`, metadata; pytest cells check the imports)
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
  dflash     tests/sglang_cpu/test_dflash_loader.py (n/a where the release has no DFLASH: every test skipped)

A release that cannot be installed is a failure, not a skip; exit status 1 if any cell failed, or if a budget or
a signal (SIGTERM, Ctrl-C) stopped the matrix before every release ran.

    python patches/compat_matrix.py [--cache-dir .ci/cache] [--releases 0.5.16,0.5.23] [--rerun]
        [--wheel-dir DIR] [--update-readme] [--json out.json] [--budget-s 900]
"""

from __future__ import annotations

import argparse
import json
import os
import py_compile
import re
import shutil
import signal
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
import matrix_venvs  # noqa: E402
from make_patches import RELEASES  # noqa: E402
from matrix_report import COLUMNS, END, OPTIONAL, START, failures, ok, table, update_readme  # noqa: E402,F401 (test_compat.py)
from matrix_venvs import run  # noqa: E402

from sglang_eagle3_ext.compat import release as compat  # noqa: E402

LOCKENV = REPO / ".ci" / "lockenv.py"
PYTEST_K = (
    "test_patch_registry or test_dump_hook or speculators or specforge or mla or through_the_wrapper "
    "or inside_the_wrapper or server_args_fields or dflash"
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
    "dflash": "tests/sglang_cpu/test_dflash_loader.py",
}


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


def locked_env(version: str) -> dict:
    """The environment of a command run in the synced venv: the pytest cells check it against the lock first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    env["SGE3_LOCKED_RELEASE"] = version
    return env


def cell_install(cache: Path, version: str, wheel_dirs, res: dict) -> tuple[Venv, Path] | None:
    """The release's own venv (cache/venv-X) made exactly its lock, and the release's wheel for the patch cells."""
    rc, out = matrix_venvs.ensure(cache, version)
    if rc:
        res["install"] = ("FAIL", f"lockenv sync {version}: {last_line(out, 'lockenv|rror')}")
        return None
    venv = Venv(matrix_venvs.venv_path(cache, version))
    rc, out = run([venv.python, str(LOCKENV), "check", version, "--no-imports"], timeout=300)
    if rc:
        res["install"] = ("FAIL", last_line(out, "^environment"))
        return None
    try:  # downloaded with the matrix's own Python: the release's venv has no pip
        wheel = compat.find_wheel(version, [*wheel_dirs, compat.cache_dir() / "wheels"]) or compat.download_wheel(
            version, compat.cache_dir() / "wheels", python=sys.executable
        )
    except compat.ReleaseUnavailable as e:
        res["install"] = ("FAIL", f"the wheel for the patch cells: {e}")
        return None
    res["install"] = ("ok", f"constraints/sglang-{version}.txt ({RELEASES[version]} transformers), exactly")
    return venv, wheel


LAUNCH_CHECK = """
import json
from sglang_eagle3_ext import cli
preset = cli.main(["launch", "--preset", "tiny-dump", "--dry-run", "--json", "preset.json"])
tp8 = cli.main(["launch", "--model-path", "model", "--tp-size", "8", "--dry-run", "--json", "tp8.json"])
print(json.dumps([preset, tp8]))
"""


def cell_launch(venv: Venv, version: str, res: dict):
    """The README's first-run preset, validated by a dry run, and a plan for a model path at TP 8: the two launch
    commands in one interpreter (SGLang's server arguments imported once)."""
    with tempfile.TemporaryDirectory() as d:
        rc, out = run([venv.python, "-c", LAUNCH_CHECK], timeout=600, cwd=d, env=locked_env(version), stdout_only=True)
        try:
            rcs = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rcs = [rc or 1, rc or 1]
        plan = {n: json.loads(f.read_text()) for n in ("preset", "tp8") if (f := Path(d) / f"{n}.json").exists()}
        note = plan.get("preset", {}).get("sglang_note") or ""
        if rcs[0] or f"sglang: {version} (flags and presets checked" not in note:
            cli = [venv.python, "-m", "sglang_eagle3_ext", "launch", "--preset", "tiny-dump", "--dry-run"]
            _, why = run(cli, timeout=300, cwd=d, env=locked_env(version))
            res["launch"] = ("FAIL", f"--preset tiny-dump --dry-run: rc={rcs[0]} {note or last_line(why, 'error')}")
        elif rcs[1] or plan.get("tp8", {}).get("tp_size") != 8:
            res["launch"] = ("FAIL", f"--model-path --tp-size 8 --dry-run: rc={rcs[1]} {last_line(out)}")
        else:
            res["launch"] = ("ok", note)


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
    matrix_venvs.mark_dirty(venv.path)  # until the revert below succeeds: a stop in between rebuilds the venv
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
        else:
            matrix_venvs.mark_clean(venv.path)


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
        if col in OPTIONAL and n and c["skipped"] == n:  # the release lacks the feature: said, not failed
            res[col] = ("n/a", c["first"])
        elif n == 0:
            res[col] = ("FAIL", f"no tests ran (pytest rc={rc}: {last_line(out)})")
        elif c["failed"] or not c["passed"]:
            res[col] = ("FAIL", f"{c['passed']}/{n} passed; {c['first']}")
        else:  # skips are a release lacking a capability (e.g. no MLA draft class before 0.5.14): said, not failed
            res[col] = (
                "ok",
                f"{c['passed']}/{n} passed" + (f", {c['skipped']} skipped ({c['first']})" if c["skipped"] else ""),
            )


def run_release(cache: Path, version: str, wheel_dirs) -> dict:
    t0 = time.monotonic()
    res: dict = {"release": version, "transformers": RELEASES.get(version, "?"), "step_s": {}}
    got = cell_install(cache, version, wheel_dirs, res)
    res["step_s"]["install"] = round(time.monotonic() - t0, 1)
    if got is None:
        for c in COLUMNS[1:]:
            res[c] = ("FAIL", "not installed")
    else:
        venv, wheel = got
        steps = {"launch": cell_launch, "targets": cell_targets, "pytest": cells_pytest, "baked": cell_baked}
        for name, step in [*steps.items(), ("patch", lambda _venv, v, r: cell_patch(v, wheel, r))]:
            t = time.monotonic()
            step(venv, version, res)
            res["step_s"][name] = round(time.monotonic() - t, 1)  # where the matrix's time goes (--json)
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


class Stopped(BaseException):
    """SIGTERM (e.g. from `timeout`): unwinds like Ctrl-C, so a cell's finally reverts what it patched."""


def _stop(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def not_run(v: str, why: str) -> dict:
    return {"release": v, "transformers": RELEASES[v], "seconds": 0, **{c: ("FAIL", why) for c in COLUMNS}}


def run_all(wanted, cache: Path, a) -> dict:
    """{release: row}: each release run (or its last pass reused) until the budget is spent or a signal stops it."""
    t0 = time.monotonic()
    by_version = {}
    try:
        for v in wanted:
            key = matrix_venvs.digest(v)
            row = None if a.rerun else matrix_venvs.passed_row(cache, v, key)
            if row is not None:
                by_version[v] = {**row, "reused": True}
                print(f"{v}: ok, reused: its inputs are those of its last passing run (--rerun runs it)", flush=True)
                continue
            if time.monotonic() - t0 > a.budget_s:
                by_version[v] = not_run(v, f"matrix budget {a.budget_s:.0f}s exhausted")
                continue
            r = by_version[v] = run_release(cache, v, a.wheel_dir)
            if ok(r):
                matrix_venvs.record_passed(cache, v, key, r)
            else:
                matrix_venvs.forget(cache, v)
            cells = "  ".join(f"{c}={r[c][0]}" for c in COLUMNS)
            print(f"{v}: {'ok' if ok(r) else 'FAIL'} ({r['seconds']} s) {cells}", flush=True)
    except (Stopped, KeyboardInterrupt) as e:
        print(f"matrix stopped by {e or 'SIGINT'}; no environment but its own cache venvs was changed", flush=True)
        for v in wanted:
            by_version.setdefault(v, not_run(v, f"matrix stopped by {e or 'SIGINT'}"))
    return by_version


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default=str(matrix_venvs.DEFAULT_CACHE), help="the releases' venvs (.ci/cache)")
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--rerun", action="store_true", help="run releases whose inputs passed before, too")
    ap.add_argument("--wheel-dir", action="append", default=[], help="where sglang-X-*.whl may already be")
    ap.add_argument("--update-readme", action="store_true", help="write the table between the README markers")
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--budget-s", type=float, default=900, help="fail releases not started within this (default 900)")
    a = ap.parse_args(argv)
    wanted = [v for v in a.releases.split(",") if v]
    unknown = [v for v in wanted if v not in RELEASES]
    if unknown:
        ap.error(f"not supported releases: {unknown} (known: {', '.join(RELEASES)})")
    old = signal.signal(signal.SIGTERM, _stop)
    t0 = time.monotonic()
    try:
        by_version = run_all(wanted, Path(a.cache_dir).absolute(), a)  # absolute: some steps run with another cwd
    finally:
        signal.signal(signal.SIGTERM, old)
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
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the cells' imports reuse their venv's bytecode (2x cheaper)
    sys.exit(main())
