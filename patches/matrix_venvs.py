"""The compatibility matrix's venvs and its record of passed releases, both under a cache folder (.ci/cache).

Each release runs in a venv of its own (`venv-X`, exactly constraints/sglang-X.txt through `.ci/lockenv.py sync`;
uv links the packages from its cache, so a new one takes seconds): the matrix never installs into, or patches,
any other environment, so `.venv` is the same whatever stops the matrix (its budget, a failure, SIGTERM, Ctrl-C).
The baked cell patches its own venv's site-packages; a `DIRTY` file stands there while the patch is in, and a venv
found with it (a run killed mid-cell) is rebuilt before use.

`passed.json` keeps, per release, the digest of what the release's cells read (its locks, patches/, this package's
source, the tests the cells run, the matrix itself) with the row of its last passing run: a release whose digest
is unchanged is not run again unless asked (`--rerun`). A clean clone has none, so CI runs every release.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO / ".ci" / "cache"
LOCKENV = REPO / ".ci" / "lockenv.py"
DIRTY = "DIRTY"  # in a venv while a cell has patched its site-packages
PASSED = "passed.json"
# what every release's cells read besides the release's own locks: the package, the tests, the patches, the tools
INPUTS = (
    "sglang_eagle3_ext",
    "patches",
    "tests/sglang_cpu",
    "tests/cpu_shims",
    "tests/conftest.py",
    "tests/helpers.py",
    "tests/train_world.py",
    "tests/acceptance_world.py",
    "tests/malformed_drafts.py",
    ".ci/lockenv.py",
    "pyproject.toml",
)


def run(cmd, timeout=600, stdout_only=False, **kw) -> tuple[int, str]:
    """(exit status, stdout + stderr); stdout_only: stdout alone (a JSON report; stderr has the library chatter).
    The command runs in a process group of its own, killed whole on a timeout or when the matrix is stopped
    (SIGTERM, Ctrl-C), so nothing it started (uv, pytest's children) outlives the matrix."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    ) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except BaseException as e:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = p.communicate()
            if not isinstance(e, subprocess.TimeoutExpired):
                raise
            return 124, f"timed out after {timeout}s: {' '.join(map(str, cmd))}\n{out or ''}"
    return p.returncode, (out or "") + ("" if stdout_only else (err or ""))


def venv_path(cache: Path, version: str) -> Path:
    return cache / f"venv-{version}"


def _uv() -> str | None:
    """The uv beside the running interpreter (the locked .venv's), else on PATH."""
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.exists() else shutil.which("uv")


def ensure(cache: Path, version: str) -> tuple[int, str]:
    """venv-VERSION made exactly the release's lock; (exit status, output) of the step that failed or of the sync."""
    path = venv_path(cache, version)
    if (path / DIRTY).exists():  # a patch may still be in its site-packages
        shutil.rmtree(path)
    if not (path / "bin" / "python").exists():
        uv = _uv()
        if uv:  # else lockenv makes it with `python -m venv` and installs the lock's uv with pip (slower)
            path.parent.mkdir(parents=True, exist_ok=True)
            rc, out = run([uv, "venv", "-q", "--python", sys._base_executable, str(path)], timeout=300)
            if rc:
                return rc, f"uv venv {path}: {out}"
            shutil.copy2(uv, path / "bin" / "uv")  # lockenv syncs with the venv's own uv; the lock's replaces it
    return run([sys.executable, str(LOCKENV), "sync", str(path), version], timeout=900)


def mark_dirty(venv: Path) -> None:
    (venv / DIRTY).write_text("a patch is applied in site-packages; the matrix rebuilds this venv\n")


def mark_clean(venv: Path) -> None:
    (venv / DIRTY).unlink(missing_ok=True)


def _files(rel: str):
    p = REPO / rel
    if p.is_file():
        yield p
    elif p.is_dir():
        yield from sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


def digest(version: str, extra_files=()) -> str:
    """sha256 over the release's locks and INPUTS (paths and bytes) and the Python version."""
    h = hashlib.sha256(sys.version.encode())
    locks = [f"constraints/sglang-{version}.txt", f"constraints/cpu/sglang-{version}.txt"]
    for rel in [*locks, *INPUTS, *extra_files]:
        for f in _files(rel):
            name = f.relative_to(REPO) if f.is_relative_to(REPO) else f
            h.update(str(name).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def load_passed(cache: Path) -> dict:
    try:
        return json.loads((cache / PASSED).read_text())
    except (OSError, ValueError):
        return {}


def passed_row(cache: Path, version: str, key: str) -> dict | None:
    """The row of the release's last passing run when its inputs are the same, else None."""
    hit = load_passed(cache).get(version)
    return hit["row"] if isinstance(hit, dict) and hit.get("digest") == key else None


def record_passed(cache: Path, version: str, key: str, row: dict) -> None:
    data = load_passed(cache)
    data[version] = {"digest": key, "row": row}
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / (PASSED + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(cache / PASSED)


def forget(cache: Path, version: str) -> None:
    data = load_passed(cache)
    if data.pop(version, None) is not None:
        (cache / PASSED).write_text(json.dumps(data, indent=1))


def installed_sglang(python: str) -> str | None:
    p = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"], capture_output=True, text=True
    )
    return p.stdout.strip() if p.returncode == 0 else None
