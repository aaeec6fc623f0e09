"""The compatibility matrix's environments (patches/matrix_venvs.py): each release in a venv of its own, so a
matrix stopped at any point (SIGTERM from `timeout`, its budget, a failure) leaves the suite's venv on its
release; a venv left patched by a stopped run is rebuilt; a release whose inputs passed before is reused."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "patches"))
import compat_matrix  # noqa: E402
import matrix_venvs  # noqa: E402
from make_patches import RELEASES  # noqa: E402

MATRIX = REPO / "patches" / "compat_matrix.py"
VERSION = "import importlib.metadata as m; print(m.version('sglang'))"


def _sglang_here() -> str:
    """The release installed in the running venv, read afresh from disk."""
    return subprocess.run([sys.executable, "-c", VERSION], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.sglang
def test_a_matrix_stopped_by_sigterm_leaves_the_suites_venv_on_its_release(tmp_path):
    """What `timeout` does to the matrix in .ci/run: SIGTERM while it installs another release."""
    before = _sglang_here()
    other = next(v for v in RELEASES if v != before)
    p = subprocess.Popen(
        [sys.executable, MATRIX, "--cache-dir", tmp_path, "--releases", other, "--rerun"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    venv = tmp_path / f"venv-{other}"
    t_end = time.monotonic() + 300  # hang protection only: the venv appears within seconds
    while not (venv / "bin" / "python").exists() and p.poll() is None and time.monotonic() < t_end:
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()[0]
    p.send_signal(signal.SIGTERM)
    out = p.communicate(timeout=300)[0]
    assert p.returncode == 1, out
    assert "matrix stopped by SIGTERM" in out and f"FAIL {other} install: matrix stopped by SIGTERM" in out, out
    assert _sglang_here() == before


def test_a_venv_left_patched_is_rebuilt_before_use(tmp_path, monkeypatch):
    venv = matrix_venvs.venv_path(tmp_path, "0.5.16")
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "patched.py").write_text("# a baked patch left in by a stopped run\n")
    matrix_venvs.mark_dirty(venv)
    monkeypatch.setattr(matrix_venvs, "LOCKENV", tmp_path / "no-lockenv.py")  # the sync step fails at once
    rc, out = matrix_venvs.ensure(tmp_path, "0.5.16")
    assert rc != 0 and "no-lockenv.py" in out
    assert not (venv / "lib" / "patched.py").exists() and not (venv / matrix_venvs.DIRTY).exists()


def test_a_release_whose_inputs_passed_before_is_reused_and_not_run(tmp_path, capsys):
    v = next(iter(RELEASES))
    row = {"release": v, "transformers": RELEASES[v], "seconds": 60.0}
    row |= {c: ("ok", "passed") for c in compat_matrix.COLUMNS}
    matrix_venvs.record_passed(tmp_path, v, matrix_venvs.digest(v), row)
    assert compat_matrix.main(["--cache-dir", str(tmp_path), "--releases", v]) == 0
    assert f"{v}: ok, reused" in capsys.readouterr().out
    assert not matrix_venvs.venv_path(tmp_path, v).exists()  # nothing was installed


def test_any_changed_input_is_a_new_digest(tmp_path):
    v = next(iter(RELEASES))
    extra = tmp_path / "input.py"
    extra.write_text("x = 1\n")
    key = matrix_venvs.digest(v, [extra])
    assert matrix_venvs.digest(v, [extra]) == key
    assert matrix_venvs.digest(v) != key and matrix_venvs.digest(list(RELEASES)[-1], [extra]) != key
    matrix_venvs.record_passed(tmp_path, v, key, {"release": v})
    extra.write_text("x = 2\n")
    assert matrix_venvs.passed_row(tmp_path, v, matrix_venvs.digest(v, [extra])) is None
    assert matrix_venvs.passed_row(tmp_path, v, key) == {"release": v}
