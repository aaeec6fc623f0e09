"""Every command keeps the README's contract: exit codes (0 ok, 1 negative verdict, 2 bad input naming the fix,
130 interrupted), one-line errors, local inputs checked before a server is contacted, --json saying what the
text says, and messages in the user's words (flags, not module paths or constants)."""
from __future__ import annotations

import json
import re

import pytest

from sglang_eagle3_ext import cli


def run(argv, capsys) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---- check ------------------------------------------------------------------------------------------------
def test_check_on_a_file_is_bad_input_in_one_line(tmp_path, capsys):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"not a folder")
    rc, out, err = run(["check", str(f)], capsys)
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert rc == 2, out + err
    assert len(lines) == 1 and "is a file" in lines[0] and str(f) in lines[0], lines


def test_check_json_says_checked_as_the_text_does(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for draft in (str(empty), "org-absent/never-downloaded"):
        rc, text, _ = run(["check", draft], capsys)
        rc_json, out, _ = run(["check", draft, "--json", "-"], capsys)
        rep = json.loads(out)
        said_unchecked = bool(re.search(r"nothing checked|NOT CHECKED", text))
        assert said_unchecked == (not rep["checked"]), (draft, text, rep["checked"])
        assert rc == rc_json == (2 if not rep["checked"] else 1)


def test_check_of_an_absent_hub_id_names_the_installed_download_command(capsys):
    rc, out, err = run(["check", "org-absent/never-downloaded"], capsys)
    assert rc == 2
    assert "hf download org-absent/never-downloaded" in out and "huggingface-cli" not in out + err
