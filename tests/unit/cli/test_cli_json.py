"""`--json [PATH]` on every command that reports (only JSON on stdout without PATH, human text otherwise) and
quiet defaults: `train` shows its own lines and a progress bar, not the logs, warnings and bars of the
libraries it drives; `--quiet` / `--verbose` on every command that shows progress."""

from __future__ import annotations

import argparse
import json

import pytest
from cli_fixtures import _all, _as_module_after, parsers, sg  # noqa: F401  (fixtures)
from train_world import SMALL, write_samples

REPORTING = ["check", "convert", "compat", "bench", "train", "launch", "dump run", "dump export", "dump status"]
WITH_PROGRESS = ["check", "convert", "bench", "train", "dump run", "dump export"]


def _parser_of(parsers, key):
    tool, *sub = key.split()
    p = parsers[tool]
    if sub:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[sub[0]]
    return p


@pytest.mark.parametrize("key", REPORTING)
def test_every_reporting_command_takes_json(parsers, key):
    a = _parser_of(parsers, key)._option_string_actions.get("--json")
    assert a is not None and a.nargs == "?" and a.const == "-" and a.metavar == "PATH", key


@pytest.mark.parametrize("key", WITH_PROGRESS)
def test_quiet_and_verbose_where_there_is_progress(parsers, key):
    p = _parser_of(parsers, key)
    assert {"--quiet", "--verbose"} <= set(p._option_string_actions), key
    with pytest.raises(SystemExit):
        p.parse_args(["--quiet", "--verbose"])


def _only_json(rc, out, err, codes=(0,)):
    assert rc in codes, err
    return json.loads(out)  # stdout holds the JSON and nothing else


# ---------------------------------------------------------------------------------------------- drafts
@pytest.fixture(scope="module")
def spec_draft(tmp_path_factory):
    pytest.importorskip("speculators")
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return make_speculators_draft(tmp_path_factory.mktemp("spec") / "spec", aux_ids=(1, 2, 3))


def test_convert_and_check_report_json(spec_draft, tmp_path, capfd):
    out_dir = tmp_path / "draft"
    r = _only_json(*sg(["convert", spec_draft, out_dir, "--sglang", "0.5.16", "--json"], capfd))
    assert r["ok"] is True and r["dst"] == str(out_dir) and r["format"] == "speculators" and r["tensors"] > 0
    r = _only_json(*sg(["check", out_dir, "--sglang", "0.5.16", "--json"], capfd))
    assert r["ok"] is True and r["draft_class"] == "LlamaForCausalLMEagle3" and r["values_scanned"] is True
    # a refusal: JSON with the problems on stdout, the one-line error on stderr
    rc, out, err = sg(["convert", tmp_path / "nothing", tmp_path / "d2", "--sglang", "0.5.16", "--json"], capfd)
    assert rc == 2 and err.startswith("sglang-eagle3 convert: error: ")


def test_a_report_inside_the_out_folder_the_command_makes(spec_draft, tmp_path, capfd):
    """`--json OUT/report.json` where OUT is the folder the command itself makes: accepted, the report written."""
    out_dir = tmp_path / "made" / "draft"
    rc, _, err = sg(["convert", spec_draft, out_dir, "--sglang", "0.5.16", "--json", out_dir / "report.json"], capfd)
    assert rc == 0, err
    assert json.loads((out_dir / "report.json").read_text())["ok"] is True


def test_compat_reports_json(capfd):
    pytest.importorskip("sglang")
    r = _only_json(*sg(["compat", "--json"], capfd))
    assert r["supported"] is True


# ---------------------------------------------------------------------------------------------- dump
def test_dump_status_is_text_by_default_and_json_on_request(tmp_path, capfd):
    from sglang_eagle3_ext.dump.manifest import ManifestWriter

    d = tmp_path / "dump"
    d.mkdir()
    (d / "dump_meta.json").write_text("{}")
    (d / "status").mkdir()
    (d / "status" / "dp0.json").write_text(
        json.dumps({"state": "dumping", "stats": {"written": 1, "skipped_multimodal": 2}})
    )
    ManifestWriter(d, "dp0").append({"id": "a", "file": "a.safetensors", "num_tokens": 7, "bytes": 100})
    rc, out, err = sg(["dump", "status", "--dump-dir", d], capfd)
    assert rc == 0 and out.startswith(f"dump {d}: 1 complete samples, 7 tokens") and "skipped_multimodal=2" in out
    assert "writer dp0: dumping" in out, out
    r = _only_json(*sg(["dump", "status", "--dump-dir", d, "--json"], capfd))
    assert r["complete_samples"] == 1 and r["skipped_multimodal"] == 2
    path = tmp_path / "s.json"
    rc, out, _ = sg(["dump", "status", "--dump-dir", d, "--json", path], capfd)
    assert rc == 0 and out.startswith("dump ") and json.loads(path.read_text())["tokens"] == 7


def test_dump_run_summary_as_text():
    from sglang_eagle3_ext.dump.driver import render_run

    sm = {
        "samples": 10,
        "already_done": 2,
        "sent": 8,
        "written": 7,
        "failed_requests": 1,
        "not_written": 0,
        "malformed_lines": 0,
        "duplicate_ids": 0,
        "seconds": 1.5,
        "tokens_written": 900,
        "gb_written": 0.001,
        "dump_dir": "d",
        "skipped_multimodal": 3,
    }
    text = render_run(sm)
    assert text.startswith("dump run: 7 of 8 sent samples written (2 of 10 already in the manifest)"), text
    assert "failed requests 1" in text and "skipped_multimodal 3" in text and "\n" not in text


def test_dump_export_reports_json(tmp_path, capfd, monkeypatch):
    pytest.importorskip("torch")
    from test_dump_export import _make_dump

    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS", "1")
    d, _ = _make_dump(tmp_path)
    r = _only_json(
        *sg(
            ["dump", "export", "--dump-dir", d, "--to", "specforge", "--out", tmp_path / "o", "--quiet", "--json"],
            capfd,
        )
    )
    assert r == {"exported": 2, "to": "specforge", "out": str(tmp_path / "o")}


# ---------------------------------------------------------------------------------------------- bench, launch
def test_bench_reports_json(capfd):
    from test_bench import serve

    srv, url, _ = serve(0.7)
    try:
        r = _only_json(
            *sg(
                [
                    "bench",
                    "--url",
                    url,
                    "--num-prompts",
                    "2",
                    "--concurrency",
                    "1",
                    "--warmup",
                    "0",
                    "--max-new-tokens",
                    "8",
                    "--quiet",
                    "--json",
                ],
                capfd,
            )
        )
    finally:
        srv.shutdown()
    assert r["status"] == "OK" and r["levels"][0]["concurrency"] == 1


@pytest.mark.sglang
def test_launch_dry_run_plan_as_json(tmp_path, capfd, monkeypatch):
    from test_launch_topology import FAKES

    monkeypatch.setenv("SGLANG_EAGLE3_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    topo = tmp_path / "topo.json"
    topo.write_text(FAKES["nvlink"][0]().to_json())
    r = _only_json(
        *sg(
            [
                "launch",
                "--preset",
                "tiny",
                "--dry-run",
                "--skip-draft-check",
                "--topology-file",
                topo,
                "--tp",
                "2",
                "--json",
            ],
            capfd,
        )
    )
    assert r["command"][1:3] == ["-m", "sglang.launch_server"] and r["tp_size"] == 2
    assert r["topology"]["class"] == "full NVLink" and any(d["name"] == "SGLANG_EAGLE3_EXT" for d in r["decisions"])
    names = _only_json(*sg(["launch", "--list-presets", "--json"], capfd))
    assert "tiny" in names
    rc, out, err = sg(["launch", "--preset", "tiny", "--json"], capfd)  # JSON on stdout is --dry-run's only
    assert rc == 2 and "--dry-run" in err and not out


# ---------------------------------------------------------------------------------------------- train
NOISE = (
    "INFO",
    "WARNING",
    "Warning",
    "Saving the dataset",
    "Writing model shards",
    "Loading from local",
    "speculators.",
    "Traceback",
)


@pytest.fixture(scope="module")
def small_world(tmp_path_factory):
    """A tiny target and 8 samples of random hidden states: enough for speculators' trainer to run 2 steps."""
    pytest.importorskip("torch")
    pytest.importorskip("speculators.train.cli")
    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target

    root = tmp_path_factory.mktemp("train_cli")
    target = ensure_tiny_target(root / "target", **SMALL)
    write_samples(root / "data", 8)
    return root, target


def test_train_shows_its_own_lines_and_reports_json(small_world, capfd):
    """By default only train's own lines and the trainer's progress bar: none of the ~50 lines per step that
    speculators, transformers, datasets and torch print (config dumps, INFO logs, warnings, other bars)."""
    root, target = small_world
    summary = root / "summary.json"
    rc, out, err = sg(
        [
            "train",
            "--data",
            root / "data",
            "--target",
            target,
            "--out",
            root / "draft",
            "--device",
            "cpu",
            "--steps",
            "2",
            "--ttt-steps",
            "1",
            "--total-seq-len",
            "64",
            "--num-workers",
            "0",
            "--intermediate-size",
            "64",
            "--min-val-acc",
            "0",
            "--json",
            summary,
        ],
        capfd,
    )
    assert rc == 0, err
    lines = (out + err).splitlines()
    own = [ln for ln in lines if ln.startswith("[train_draft] ")]
    assert own and own[-1].startswith("[train_draft] DONE steps=2"), out
    noise = [ln for ln in lines if not ln.startswith(("[train_draft] ", "Epoch ")) or any(w in ln for w in NOISE)]
    assert not noise and len(lines) <= 12, "\n".join(noise or lines)
    r = json.loads(summary.read_text())
    assert r["steps"] == 2 and r["saved"] == str(root / "draft") and r["layer_ids"] == [1, 2, 3]
