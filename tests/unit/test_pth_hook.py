"""The start-up hook's value handling, in fresh interpreters (no SGLang import needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_environment_faults import broken_package

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value,enabled", [("1", True), ("yes", True), ("0", False), ("", False), ("off", False)])
def test_value_decides(value, enabled):
    env = {**os.environ, "SGLANG_EAGLE3_EXT": value}
    code = (
        "import sys; import sglang_eagle3_ext._startup_hook; from sglang_eagle3_ext import _activate;"
        "print(_activate._hooks_registered)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(enabled)


def test_a_package_failing_to_import_at_start_up_is_named_with_its_fix(tmp_path):
    """The .pth route with an installed package whose import raises (wrapt, which the post-import hooks need, as a
    build for another Python would): the interpreter starts, the package stays off, and its one line names the
    package, its version and the fix, as the commands do (diagnosis.environment_fault)."""
    err = "libwrapt.so: cannot open shared object file"
    fake = broken_package(tmp_path, "wrapt", f"raise OSError({err!r})\n", "9.9")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    env.update(SGLANG_EAGLE3_EXT="1", PYTHONPATH=os.pathsep.join([str(fake), str(REPO)]))
    code = "import sglang_eagle3_ext._startup_hook; from sglang_eagle3_ext import _activate; print('started')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "started", out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if "sglang_eagle3_ext disabled" in ln]
    assert len(lines) == 1, out.stderr[-2000:]
    assert "the environment is broken" in lines[0] and "wrapt 9.9" in lines[0] and err in lines[0], lines[0]
    assert "pip uninstall wrapt" in lines[0], lines[0]


def test_gpu_helpers_activation_fallback_works_in_a_venv(tmp_path):
    """tests/gpu's activation_env must switch the hook on in every interpreter SGLang spawns, also where
    our .pth is not installed. There it relies on a file on PYTHONPATH that site.py imports: a
    sitecustomize.py, since a venv's interpreter (the GPU host runs one) never imports usercustomize --
    which is how a GPU benchmark once ran with dumping silently off."""
    import venv
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
    from gpu_helpers import activation_env

    venv.create(tmp_path / "venv", with_pip=False, system_site_packages=False)
    py = tmp_path / "venv" / "bin" / "python"
    env = {**os.environ, **activation_env(tmp_path, fallback=True)}
    out = subprocess.run(
        [str(py), "-c", "import sys; print('sglang_eagle3_ext._startup_hook' in sys.modules)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
