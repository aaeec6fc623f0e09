"""`compat` on wheels that are not what they claim (not a zip, truncated, corrupt member, no sglang/ inside):
exit 2 naming the wheel, nothing cached that a later run would trust; local inputs are checked before a
download, and a download says so in one line."""

from __future__ import annotations

import io
import zipfile

import pytest

from sglang_eagle3_ext.cli import common as cli_common
from sglang_eagle3_ext.cli import compat as compat_cli

V = "0.5.99"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_CACHE", str(d))
    return d


def _zip(files: dict[str, str], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


TREE = {
    "sglang/__init__.py": "",
    "sglang/version.py": f'__version__ = "{V}"\n',
    "sglang/srt/__init__.py": "",
    "sglang/srt/server_args.py": "x = 1\n" * 2000,
}


def _corrupt_member(data: bytes) -> bytes:
    """Flip bytes inside the deflated data of the largest member (directory intact)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = max(z.infolist(), key=lambda i: i.compress_size)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    mid = start + info.compress_size // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 16]) + data[mid + 16 :]


WHEELS = {
    "not a zip": lambda: b"<html>502 Bad Gateway</html>",
    "empty file": lambda: b"",
    "truncated": lambda: _zip(TREE)[: len(_zip(TREE)) // 2],
    "corrupt member": lambda: _corrupt_member(_zip(TREE)),
    "no sglang inside": lambda: _zip({"other/__init__.py": "", "other/srt/x.py": ""}),
}


def _run(argv):
    return cli_common.run_tool("compat", compat_cli.main, argv)


@pytest.mark.parametrize("name", list(WHEELS))
def test_corrupt_wheel_in_a_wheel_dir_exits_2_naming_it(tmp_path, cache, capsys, name):
    wd = tmp_path / "wheels"
    wd.mkdir()
    wheel = wd / f"sglang-{V}-py3-none-any.whl"
    wheel.write_bytes(WHEELS[name]())
    assert _run(["--sglang", V, "--wheel-dir", str(wd)]) == 2
    err = capsys.readouterr().err
    assert wheel.name in err and "error:" in err and "Traceback" not in err, err
    assert wheel.exists()  # the user's file is left alone
    # nothing half-unpacked is left where a later run would take it for a good extraction
    assert not list((cache / "src").glob("*/.sge3_unpacked")) if (cache / "src").exists() else True
    assert _run(["--sglang", V, "--wheel-dir", str(wd)]) == 2


@pytest.mark.parametrize("name", ["not a zip", "truncated", "no sglang inside"])
def test_wheel_flag_checks_one_file(tmp_path, cache, capsys, name):
    wheel = tmp_path / f"sglang-{V}-py3-none-any.whl"
    wheel.write_bytes(WHEELS[name]())
    assert _run(["--wheel", str(wheel)]) == 2
    err = capsys.readouterr().err
    assert "--wheel" in err and wheel.name in err


def test_wheel_flag_on_a_good_wheel_unpacks_and_reads_its_version(tmp_path, cache, capsys):
    wheel = tmp_path / f"sglang-{V}-py3-none-any.whl"
    wheel.write_bytes(_zip(TREE))
    rc = _run(["--wheel", str(wheel)])
    out = capsys.readouterr().out
    assert rc == 1 and f"sglang {V}" in out  # a toy tree: its patch targets are missing, a negative verdict


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--sglang", V, "--download", "--wheel-dir", "/no/such/dir"], "--wheel-dir"),
        (["--sglang", V, "--download", "--json", "/no/such/dir/out.json"], "--json"),
        (["--sglang", "not a version", "--download"], "--sglang"),
        (["--sglang", "../../x", "--download"], "--sglang"),
        (["--wheel", "/no/such.whl"], "--wheel"),
        (["--source", "/no/such/tree"], "--source"),
    ],
)
def test_local_inputs_are_checked_before_any_download(tmp_path, cache, capsys, argv, flag):
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and "downloading" not in err, err
    assert not (cache / "wheels").exists()


def test_a_download_says_so_in_one_line_and_a_failure_exits_2(tmp_path, cache, capsys, monkeypatch):
    # an index that refuses connections: pip fails at once, no network needed
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    assert _run(["--sglang", V, "--download"]) == 2
    err = capsys.readouterr().err
    assert sum("downloading" in line for line in err.splitlines()) == 1, err
    assert err.index("downloading") < err.index("error:")
