"""`dump export` through the CLI: parallel workers give the same files as one worker, a progress bar on stderr,
--quiet silences it, a mistyped --dump-dir is one line and exit 2."""

from __future__ import annotations

import hashlib

import pytest
from test_dump_export import _make_dump, _short_samples_allowed  # noqa: F401  (fixture: autouse there, used here)

from sglang_eagle3_ext.cli.common import run_tool
from sglang_eagle3_ext.cli.dump import main as dump_main


def _digest(root):
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != "sge3_export.json":
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("to", ["speculators", "specforge"])
def test_parallel_export_equals_serial_and_shows_progress(tmp_path, capsys, to, _short_samples_allowed):
    d, _ = _make_dump(tmp_path, final="both", lens=tuple(range(3, 15)))
    one, many = tmp_path / "one", tmp_path / "many"
    assert (
        run_tool(
            "dump",
            dump_main,
            ["export", "--dump-dir", str(d), "--to", to, "--out", str(one), "--workers", "1", "--quiet"],
        )
        == 0
    )
    assert "sample" not in capsys.readouterr().err
    assert (
        run_tool("dump", dump_main, ["export", "--dump-dir", str(d), "--to", to, "--out", str(many), "--workers", "4"])
        == 0
    )
    err = capsys.readouterr().err
    assert f"export {to}" in err and "12/12" in err  # the tqdm bar
    a, b = _digest(one), _digest(many)
    assert len(a) >= 12 and a == b


def test_mistyped_dump_dir_is_one_line(tmp_path, capsys):
    rc = run_tool(
        "dump",
        dump_main,
        ["export", "--dump-dir", str(tmp_path / "nope"), "--to", "specforge", "--out", str(tmp_path / "o")],
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "nope: no such folder" in err and "Traceback" not in err and len(err.splitlines()) == 1
