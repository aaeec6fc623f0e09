"""`tiny --sample-dump`: the tiny target's hidden states computed on CPU, in the dumping server's files, with
its layer rule, read back by the dump's own readers (manifest, status)."""

from __future__ import annotations

import json

import pytest

from sglang_eagle3_ext import cli


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    pytest.importorskip("transformers")
    from sglang_eagle3_ext.tiny.deepseek_v3 import PREDICTABLE, ensure_tiny_target

    return ensure_tiny_target(tmp_path_factory.mktemp("t") / "tiny", **PREDICTABLE)


def test_sample_dump_is_a_dump_the_readers_take(target, tmp_path, capsys):
    from sglang_eagle3_ext.draft.layers import default_layers
    from sglang_eagle3_ext.dump.manifest import read_manifest

    out = tmp_path / "dumps"
    rc = cli.main(
        ["tiny", str(target), "--predictable", "--sample-dump", str(out), "--samples", "3", "--max-new-tokens", "2"]
    )
    err = capsys.readouterr().err
    assert rc == 0 and "[sample-dump] 3/3 samples" in err and "%|" not in err, err  # ours, no library bars
    meta = json.loads((out / "dump_meta.json").read_text())
    assert meta["layer_indices_hf"] == default_layers(4) and meta["num_hidden_layers"] == 4
    assert len(read_manifest(out)) == 3
    gen = [json.loads(x) for x in (out / "generated.jsonl").read_text().splitlines()]
    assert [g["len"] - g["prompt_len"] for g in gen] == [2, 2, 2]
    assert cli.main(["dump", "status", "--dump-dir", str(out)]) == 0
    assert "3 complete samples" in capsys.readouterr().out


def test_sample_dump_refuses_a_used_folder_before_any_work(target, tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("")
    rc = cli.main(["tiny", str(target), "--predictable", "--sample-dump", str(used)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a new or empty folder" in err and len(err.strip().splitlines()) == 1, err


def test_prompts_file_with_text_is_refused_by_name(target, tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "text": "hello"}\n')
    rc = cli.main(["tiny", str(target), "--predictable", "--sample-dump", str(tmp_path / "d"), "--prompts", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "token ids" in err, err
