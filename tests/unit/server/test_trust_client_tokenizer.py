"""No code runs from a path the user did not name: a server whose /get_server_info names a model folder
holding a tokenizer with its own Python module never gets that module imported by `bench` or `dump run`;
a folder the user names with --target runs its tokenizer's code only with an explicit --trust-remote-code."""

from __future__ import annotations

import json

import pytest
from trust_client_servers import Replies

from sglang_eagle3_ext.cli import bench
from sglang_eagle3_ext.cli import dump as client
from sglang_eagle3_ext.cli.common import run_tool

pytest.importorskip("transformers")

EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from transformers import PreTrainedTokenizerFast


class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


@pytest.fixture
def evil_model(tmp_path, monkeypatch):
    """(a model folder whose tokenizer ships evil_tok.py, the file that module writes when imported)."""
    import transformers.dynamic_module_utils as dmu
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))  # nothing outside tmp_path
    marker = tmp_path / "EVIL_CODE_RAN"
    d = tmp_path / "served_model"
    tk = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>").save_pretrained(d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["auto_map"] = {"AutoTokenizer": [None, "evil_tok.EvilTokenizer"]}
    cfg["tokenizer_class"] = "EvilTokenizer"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "evil_tok.py").write_text(EVIL.format(marker=str(marker)))
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return d, marker


@pytest.fixture
def server(evil_model):
    d, _ = evil_model
    srv = Replies(
        {
            "/health": {},
            "/get_server_info": {"model_path": str(d), "tokenizer_path": str(d)},
            "/generate": {"output_ids": [1, 2], "meta_info": {"completion_tokens": 2}},
        }
    )
    yield srv
    srv.close()


def _err(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err


def _data_and_dump(tmp_path):
    """A one-sample data file and a dump folder `dump run` accepts."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "text": "hello world"}) + "\n")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_meta.json").write_text("{}")
    return data, dump


def test_bench_never_loads_the_tokenizer_the_server_names(tmp_path, evil_model, server, capsys):
    _, marker = evil_model
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "hello world"}]}) + "\n")
    rc = run_tool(
        "bench",
        bench.main,
        ["--url", server.url, "--prompts", str(prompts), "--quiet", "--warmup", "0", "--concurrency", "1"],
    )
    err = _err(capsys)
    assert not marker.exists(), "the tokenizer code of a folder named only by the server ran"
    assert rc == 2 and "pass --target DIR" in err, err
    assert server.posts == []  # refused before anything was sent


def test_dump_run_never_loads_the_tokenizer_the_server_names(tmp_path, evil_model, server, capsys):
    _, marker = evil_model
    data, dump = _data_and_dump(tmp_path)
    rc = run_tool(
        "dump",
        client.main,
        ["run", "--url", server.url, "--data", str(data), "--dump-dir", str(dump), "--quiet", "--wait-s", "0"],
    )
    err = _err(capsys)
    assert not marker.exists(), "the tokenizer code of a folder named only by the server ran"
    assert rc == 2 and "pass --target DIR" in err, err
    assert server.posts == []


@pytest.mark.parametrize("tool", ["bench", "dump"])
def test_a_named_target_runs_its_code_only_when_trusted(tmp_path, evil_model, server, capsys, tool):
    d, marker = evil_model
    data, dump = _data_and_dump(tmp_path)
    if tool == "bench":
        main, argv = (
            bench.main,
            [
                "--url",
                server.url,
                "--prompts",
                str(data),
                "--quiet",
                "--warmup",
                "0",
                "--concurrency",
                "1",
                "--target",
                str(d),
            ],
        )
    else:
        main, argv = (
            client.main,
            [
                "run",
                "--url",
                server.url,
                "--data",
                str(data),
                "--dump-dir",
                str(dump),
                "--quiet",
                "--wait-s",
                "0",
                "--target",
                str(d),
            ],
        )
    rc = run_tool(tool, main, argv)
    err = _err(capsys)
    assert not marker.exists(), "the tokenizer code ran without --trust-remote-code"
    assert rc == 2 and "--trust-remote-code" in err and str(d) in err, err
    assert server.posts == []
    run_tool(tool, main, argv + ["--trust-remote-code"])  # the user's explicit choice
    assert marker.exists()
