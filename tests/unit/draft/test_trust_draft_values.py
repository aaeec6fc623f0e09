"""`check` answers "will this serve": it reads every weight once for NaN/Inf by default, as the loader does at
start-up; `--headers-only` is the fast mode and its verdict says "values not scanned". The launcher's pre-check
scans too. No SGLang import: every call names the release."""

from __future__ import annotations

import io
import json

import pytest

from sglang_eagle3_ext.cli.common import run_tool
from sglang_eagle3_ext.draft import errors as E

pytest.importorskip("speculators")
V = "0.5.16"


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    from malformed_drafts import make_variant

    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("values")
    good = convert(
        make_speculators_draft(root / "spec", aux_ids=(1, 4, 6)), root / "good", sglang_version=V, log=lambda *_: None
    )
    return {"good": good, "nan": make_variant(good, "nan_weight", root / "nan")[1]}


def _check(capsys, *argv):
    from sglang_eagle3_ext.cli.check import main

    rc = run_tool("check", main, [*map(str, argv), "--sglang", V])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_check_scans_values_by_default(capsys, drafts):
    rc, out, _ = _check(capsys, drafts["nan"])
    assert rc == 1 and "[non-finite]" in out and "layers.0.mlp.down_proj.weight" in out, out
    rc, out, _ = _check(capsys, drafts["good"])
    assert rc == 0 and "scanned for NaN/Inf" in out and "not scanned" not in out, out


def test_headers_only_is_fast_and_says_so(capsys, drafts):
    for flag in ("--headers-only", "--no-scan-values"):
        rc, out, _ = _check(capsys, drafts["nan"], flag)
        assert rc == 0 and "OK (values not scanned" in out, out
    rc, out, _ = _check(capsys, drafts["nan"], "--headers-only", "--json", "-")
    assert json.loads(out)["values_scanned"] is False


def test_scan_values_flag_still_accepted(capsys, drafts):
    rc, out, _ = _check(capsys, drafts["nan"], "--scan-values")
    assert rc == 1 and "[non-finite]" in out
    rc, out, _ = _check(capsys, drafts["good"], "--scan-values", "--json", "-")
    assert rc == 0 and json.loads(out)["values_scanned"] is True


def test_launcher_precheck_refuses_a_nan_draft(drafts):
    from sglang_eagle3_ext.launch.draft_precheck import DraftCheckFailed, precheck

    with pytest.raises(DraftCheckFailed, match=E.NON_FINITE):
        precheck("EAGLE3", str(drafts["nan"]), None, V)
    d = precheck("EAGLE3", str(drafts["good"]), None, V)
    assert d.value == "passed" and "values scanned" in d.reason and "no NaN/Inf" in d.reason
    fast = precheck("EAGLE3", str(drafts["nan"]), None, V, scan_values=False)
    assert fast.value == "passed" and "values not scanned" in fast.reason


def test_describe_draft_says_it_did_not_scan(drafts):
    from sglang_eagle3_ext.draft.check import describe_draft

    assert describe_draft(drafts["good"], V)["values_scanned"] is False


def test_progress_line_for_long_reads():
    from sglang_eagle3_ext.draft.progress import ByteProgress

    quiet = io.StringIO()
    p = ByteProgress("check", 10 << 20, stream=quiet)  # small: nothing said
    p.add(10 << 20)
    p.close()
    assert quiet.getvalue() == ""
    log = io.StringIO()
    p = ByteProgress("check: scanning values", 3 << 30, stream=log)
    p.every = 0.0  # a log stream: one line per interval
    p.add(1 << 30)
    p.add(2 << 30)
    p.close()
    assert log.getvalue().splitlines() == [
        "[check: scanning values] 1.00/3.00 GiB",
        "[check: scanning values] 3.00/3.00 GiB",
    ]
