"""The locked test environments (.ci/lockenv.py, constraints/): every lock is complete and pinned, the check names a
drifted package with its version and the lock to regenerate, pytest stops before collecting in a drifted
environment, and each extra set installs from the constraints into a fresh venv and imports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext import versions
from tests.conftest import LOCK_FILE_ENV, LOCKED_ENV, load_lockenv

REPO = Path(__file__).resolve().parents[2]
lockenv = load_lockenv()
LOCKED = os.environ.get(LOCKED_ENV)
needs_locked_env = pytest.mark.skipif(not LOCKED, reason=f"not a locked environment ({LOCKED_ENV} unset)")


@pytest.mark.parametrize("release", list(versions.TESTED_RELEASES))
def test_every_release_has_a_complete_pinned_lock(release):
    lock = lockenv.lock_path(release)
    pins = lockenv.lock_pins(lock)  # refuses any line that is not name==version
    cpu = lockenv.lock_pins(lockenv.cpu_lock_path(lock))
    assert pins["sglang"] == release and pins["transformers"] == versions.TESTED_RELEASES[release]
    assert cpu["torch"] == f"{lockenv.TORCH}+cpu" and set(lockenv.CPU_STACK) <= set(cpu)
    assert not set(pins) & set(cpu), "a package pinned twice"
    assert not set(pins) & set(lockenv.EXCLUDED), "an excluded (CUDA-only) package in the lock"
    assert "uv" in pins and "pytest" in pins and "speculators" in pins
    text = lock.read_text()
    assert all(name in text.split("\n# torch")[0] for name in lockenv.EXCLUDED), "the header names what is left out"


def test_lock_lines_that_are_not_pins_are_refused(tmp_path):
    bad = tmp_path / "lock.txt"
    bad.write_text("wrapt>=1.16\n")
    with pytest.raises(SystemExit):
        lockenv.lock_pins(bad)


def _edited_lock(tmp_path: Path, release: str) -> tuple[Path, str, str]:
    """A scratch copy of the release's lock with one version wrong and one entry missing (both installed here)."""
    lock = lockenv.lock_path(release)
    text = lock.read_text()
    wrong, missing = "wrapt", "pyyaml"
    text = re.sub(rf"(?m)^{wrong}==\S+", f"{wrong}==0.0.1", text)
    text = re.sub(rf"(?m)^{missing}==.*\n", "", text)
    out = tmp_path / "constraints" / lock.name
    out.parent.mkdir()
    out.write_text(text)
    (out.parent / "cpu").mkdir()
    shutil.copy(lockenv.cpu_lock_path(lock), out.parent / "cpu" / lock.name)
    return out, wrong, missing


def _check(*args) -> subprocess.CompletedProcess:
    """`lockenv.py check` in a fresh interpreter of this environment (what the suite's own process has put on
    sys.path does not count)."""
    return subprocess.run(
        [sys.executable, str(REPO / ".ci" / "lockenv.py"), "check", *map(str, args), "--no-imports"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_environment_check_names_a_wrong_version_and_a_missing_entry(tmp_path):
    from importlib import metadata

    release = LOCKED or versions.RECOMMENDED
    edited, wrong, missing = _edited_lock(tmp_path, release)
    r = _check(release, "--lock", edited)
    bad = [ln.removeprefix("environment: ") for ln in r.stderr.splitlines()]
    have = metadata.version(wrong)
    assert r.returncode == 1
    assert any(ln.startswith(f"{wrong} is {have}, {edited} says 0.0.1") and "lockenv.py lock" in ln for ln in bad), bad
    assert any(ln.startswith(f"{missing} ") and "has no line for it" in ln for ln in bad), bad
    if LOCKED:  # the pristine lock: nothing to say
        r = _check(release)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr


@needs_locked_env
def test_pytest_stops_before_collection_naming_the_package(tmp_path):
    edited, wrong, _ = _edited_lock(tmp_path, LOCKED)
    env = {**os.environ, LOCK_FILE_ENV: str(edited)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_versions.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 4, out[-2000:]
    assert f"{wrong} is " in out and "says 0.0.1" in out and "error during collection" not in out.lower(), out[-2000:]


def test_failed_import_is_named_by_its_distribution(tmp_path, monkeypatch):
    pkg = tmp_path / "site-packages" / "sge3_broken_mod"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ValueError('Either a revision or a version must be specified')\n")
    monkeypatch.syspath_prepend(str(pkg.parent))
    [(mod, err, dist)] = lockenv.failed_imports(["sge3_broken_mod"])
    assert mod == "sge3_broken_mod" and err.startswith("ValueError: Either a revision") and dist == "sge3_broken_mod"


# ---- users' installs: each extra set from the constraints, into a fresh venv
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
CPU_SETS = {
    "": ["sglang_eagle3_ext"],
    "train": ["speculators", "datasets", "transformers", "torch"],
    "models": ["transformers", "tokenizers", "huggingface_hub", "torch"],
    "bench": ["transformers", "matplotlib"],
    "train,models,bench": ["speculators", "matplotlib", "tokenizers"],
}


def _uv(*args, **kw):
    return subprocess.run([UV, *map(str, args)], capture_output=True, text=True, timeout=900, **kw)


@pytest.mark.skipif(not (UV and LOCKED), reason="needs uv and the locked environment (network: PyPI)")
def test_extra_sets_install_from_the_constraints_and_import(tmp_path):
    lock = lockenv.lock_path(versions.RECOMMENDED)
    venv = tmp_path / "venv"
    assert _uv("venv", "-q", "-p", sys.executable, venv).returncode == 0
    py = venv / "bin" / "python"
    # the CPU stack first, as the test environment has it (PyPI's torchvision beside the CPU torch, with the
    # stand-in that lets it import; the users' CPU route of the README installs no torchvision)
    r = _uv(
        "pip", "install", "-q", "--python", py, *lockenv.torch_source(), "-c", lock, "-r", lockenv.cpu_lock_path(lock)
    )
    assert r.returncode == 0, r.stderr[-1500:]
    lockenv.install_shims(venv, versions.RECOMMENDED)
    # torchaudio (speculators asks for it): PyPI has only the CUDA build, which cannot load beside a CPU torch, and
    # PyTorch's CPU index is not reachable from every CI machine; the sets are installed without it (their imports
    # do not need it) and resolved with it below
    no_audio = tmp_path / "no-torchaudio.txt"
    no_audio.write_text('torchaudio ; python_version < "0"\n')
    for extra, mods in CPU_SETS.items():
        target = f"{REPO}[{extra}]" if extra else str(REPO)
        r = _uv(
            "pip", "install", "-q", "--python", py, "-c", lock, "--override", no_audio, *lockenv.torch_source(), target
        )
        assert r.returncode == 0, f"[{extra}]: {r.stderr[-1500:]}"
        r = subprocess.run([py, "-c", "import " + ", ".join(mods)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"[{extra}] imports: {r.stderr[-1500:]}"
        torch = subprocess.run(
            [py, "-c", "import importlib.metadata as m; print(m.version('torch'))"], capture_output=True, text=True
        ).stdout.strip()
        assert not torch or torch.endswith("+cpu"), f"[{extra}] replaced the CPU torch with {torch}"
    # the GPU sets resolve against the same constraints (their CUDA wheels are not downloaded here)
    for extra in ("sglang", "sglang,train,models,bench"):
        r = _uv("pip", "install", "--dry-run", "--python", py, "-c", lock, f"{REPO}[{extra}]")
        assert r.returncode == 0 and f"sglang=={versions.RECOMMENDED}" in r.stderr, f"[{extra}]: {r.stderr[-1500:]}"
