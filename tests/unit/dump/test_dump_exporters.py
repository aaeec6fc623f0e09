"""The export formats are a registry: `dump export --to` offers exactly its names, a new format is one module plus
one registry line, and a name that is not registered is refused naming the formats (never routed to another)."""

from __future__ import annotations

import json

import pytest
from helpers import assert_names_its_input
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.cli.common import run_tool
from sglang_eagle3_ext.cli.dump import build_parser
from sglang_eagle3_ext.cli.dump import main as dump_main
from sglang_eagle3_ext.dump import driver, exporters
from sglang_eagle3_ext.dump.config import META_FILE
from sglang_eagle3_ext.dump.export import ExportError

CALLS: list[tuple] = []


def fake_export(dump_dir, out, **kw) -> int:
    """A format registered by the test: records its call."""
    CALLS.append((str(dump_dir), str(out), sorted(kw)))
    return 7


def _dump_dir(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    (d / META_FILE).write_text(json.dumps({"layer_indices_hf": [1, 2, 3], "hidden_size": 8, "final": "both"}))
    return d


def _to_choices(parser) -> tuple:
    export = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "export")[1]
    return tuple(next(a for a in export._actions if a.dest == "to").choices)


def test_export_offers_exactly_the_registered_formats():
    assert exporters.names() == ("speculators", "specforge")
    assert _to_choices(build_parser()) == exporters.names()
    for name in exporters.names():  # every registry line names a function that exists
        assert callable(exporters.get(name)), name


def test_a_new_format_is_one_registry_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(exporters.FORMATS, "copy", f"{__name__}:fake_export")
    CALLS.clear()
    d, out = _dump_dir(tmp_path), tmp_path / "out"
    assert "copy" in _to_choices(build_parser())
    rc = run_tool("dump", dump_main, ["export", "--dump-dir", str(d), "--to", "copy", "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert CALLS == [(str(d), str(out), ["loss_masks", "order", "progress", "workers"])]
    assert "exported 7 samples for copy" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["nope", "Specforge", "", "speculators "])
def test_an_unregistered_format_is_refused_naming_the_formats(tmp_path, name, capsys):
    d, out = _dump_dir(tmp_path), tmp_path / "out"
    with pytest.raises(ExportError) as e:
        driver.export(d, name, out)
    assert f"no export format {name!r}" in str(e.value) and "speculators, specforge" in str(e.value)
    rc = run_tool("dump", dump_main, ["export", "--dump-dir", str(d), "--to", name, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "specforge" in err and "speculators" in err and "Traceback" not in err, err
    assert not out.exists()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=16))
def test_any_unregistered_format_name_is_refused(tmp_path_factory, capsys, name):
    """Whatever unregistered name follows --to: exit 2 (a usage error, never a bug's 3), nothing written."""
    assume(name not in exporters.names())
    root = tmp_path_factory.mktemp("any")
    d, out = _dump_dir(root), root / "out"
    capsys.readouterr()
    rc = run_tool("dump", dump_main, ["export", "--dump-dir", str(d), "--to", name, "--out", str(out)])
    assert rc == 2 and not out.exists()
    assert_names_its_input(capsys.readouterr().err, "--to")
