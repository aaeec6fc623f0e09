"""An installed package that fails to import is the environment's fault, not a bug of this tool: exit 2 with one
line naming the package and the fix, never exit 3. The case a CPU install meets: PyPI's torchvision (a CUDA build)
beside a CPU torch, which transformers imports when a model class loads (`operator torchvision::nms does not
exist`). Our own code failing, at import or called back from inside another package's import, stays a bug (3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sglang_eagle3_ext
from sglang_eagle3_ext.cli.common import EXIT_BAD_INPUT, EXIT_INTERNAL, run_tool

REPO = Path(__file__).resolve().parents[3]
NMS = "operator torchvision::nms does not exist"


def broken_package(root: Path, name: str, body: str, version: str = "1.0", requires: tuple[str, ...] = ()) -> Path:
    """A package `name` in `root` (with its dist-info, as pip leaves one) whose import runs `body`."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    meta = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "top_level.txt").write_text(name + "\n")
    return root


def test_a_torchvision_built_for_another_torch_is_named_as_the_environment(tmp_path):
    """`tiny` where transformers meets a torchvision whose import raises as PyPI's CUDA build does beside a CPU
    torch: one line naming torchvision and its fix, exit 2, nothing written."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    fake = broken_package(
        tmp_path / "site", "torchvision", f"raise RuntimeError({NMS!r})\n", "0.28.0", ("torch==2.13.0",)
    )
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    env.update(PYTHONPATH=os.pathsep.join([str(fake), str(REPO)]), SGLANG_EAGLE3_EXT_CACHE=str(tmp_path / "cache"))
    p = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext", "tiny", "./tiny-target"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [ln for ln in p.stderr.splitlines() if ": error: " in ln]
    assert p.returncode == EXIT_BAD_INPUT, p.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in p.stderr and "a bug" not in p.stderr, p.stderr[-3000:]
    line = errors[0]
    assert "the environment is broken" in line and "torchvision 0.28.0" in line and NMS in line, line
    assert "pip uninstall torchvision" in line and "installed torch" in line, line
    assert not (work / "tiny-target").exists()


def _import(name: str):
    def main(argv):
        __import__(name)

    return main


def test_a_third_party_import_failure_is_exit_2_naming_the_package(tmp_path, monkeypatch, capsys):
    broken_package(tmp_path, "sge3_probe_lib", "import os\nos.fspath(None)\n", "2.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_tool("check", _import("sge3_probe_lib"), []) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "importing sge3_probe_lib 2.1 fails with TypeError" in err, err
    assert "pip uninstall sge3_probe_lib" in err and "a bug" not in err, err


def test_a_name_the_installed_release_lacks_is_the_environment(tmp_path, monkeypatch, capsys):
    broken_package(tmp_path, "sge3_probe_old", "VERSION = 1\n", "0.1")
    monkeypatch.syspath_prepend(str(tmp_path))

    def main(argv):
        from sge3_probe_old import NEWER_API  # noqa: F401

    assert run_tool("check", main, []) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "sge3_probe_old 0.1" in err and "cannot import name 'NEWER_API'" in err, err


@pytest.fixture
def our_probe(tmp_path, monkeypatch):
    """Modules of our own package, made for the test: `sglang_eagle3_ext._probe_broken` (raises at import) and
    `sglang_eagle3_ext._probe_fn.boom()` (raises when called)."""
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "_probe_broken.py").write_text("raise RuntimeError('our own module is broken')\n")
    (ours / "_probe_fn.py").write_text("def boom():\n    raise RuntimeError('our callback is broken')\n")
    monkeypatch.setattr(sglang_eagle3_ext, "__path__", [*sglang_eagle3_ext.__path__, str(ours)])
    yield
    for m in ("sglang_eagle3_ext._probe_broken", "sglang_eagle3_ext._probe_fn", "sge3_probe_calls_us"):
        sys.modules.pop(m, None)


def test_our_own_module_failing_at_import_is_still_a_bug(our_probe, capsys):
    assert run_tool("check", _import("sglang_eagle3_ext._probe_broken"), []) == EXIT_INTERNAL
    assert "a bug" in capsys.readouterr().err


def test_our_code_called_back_from_another_import_is_still_a_bug(our_probe, tmp_path, monkeypatch, capsys):
    broken_package(tmp_path / "lib", "sge3_probe_calls_us", "from sglang_eagle3_ext._probe_fn import boom\nboom()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    assert run_tool("check", _import("sge3_probe_calls_us"), []) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "our callback is broken" in err and "a bug" in err and "environment" not in err, err
