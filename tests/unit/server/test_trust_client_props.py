"""Property tests over every outside input the server clients read: server replies (a loopback server answering
generated JSON to /generate and /get_server_info), manifest lines, writers' status files and prompt/data files.
`bench`, `dump run` and `dump status` run in-process on each: exit 0, 1 or 2 only — never 3, never a
traceback — and `dump status` writes nothing."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from helpers import assert_names_its_input  # noqa: E402
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from trust_client_servers import Replies  # noqa: E402

from sglang_eagle3_ext.cli import bench  # noqa: E402
from sglang_eagle3_ext.cli import dump as client  # noqa: E402
from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
json_values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8
)
# a count: an integer (in range or not) or anything else a count must not be
counts = (
    st.integers(-2, 6)
    | st.integers(0, 2**40)
    | st.none()
    | st.booleans()
    | st.text(max_size=2)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.integers(0, 3), max_size=2)
    | json_values
)
meta = st.fixed_dictionaries(
    {},
    optional={
        "completion_tokens": counts,
        "spec_verify_ct": counts,
        "spec_num_correct_drafts": counts,
        "spec_num_proposed_drafts": counts,
        "spec_accept_histogram": st.lists(counts, max_size=5) | json_values,
    },
)
generate_replies = json_values | st.fixed_dictionaries(
    {},
    optional={
        "output_ids": st.lists(st.integers(-1, 5) | json_values, max_size=4) | json_values,
        "text": st.text(max_size=4) | json_values,
        "meta_info": meta | json_values,
    },
)
info_replies = json_values | st.fixed_dictionaries(
    {},
    optional={
        "speculative_num_draft_tokens": counts,
        "speculative_num_steps": counts,
        "model_path": json_values,
        "attention_backend": st.sampled_from(["triton", "fa3"]) | json_values,
        "skip_tokenizer_init": json_values,
        "disable_cuda_graph": json_values,
        "internal_states": st.lists(
            st.fixed_dictionaries({}, optional={"avg_spec_accept_length": counts}) | json_values, max_size=2
        )
        | json_values,
        "server_args": json_values,
    },
)


@pytest.fixture(scope="module")
def server():
    srv = Replies({"/health": {}})
    yield srv
    srv.close()


def _ok(rc, capsys, *inputs):
    """Any outcome but a bug; a refusal (exit 2) names one of `inputs`."""
    err = capsys.readouterr().err
    assert rc in (0, 1, 2) and "Traceback" not in err and "a bug" not in err, (rc, err)
    if rc == 2:
        assert_names_its_input(err, *inputs)


@SETTINGS
@given(gen=generate_replies, info=info_replies)
@example(gen={"output_ids": [1], "meta_info": []}, info={})
@example(gen={"output_ids": [1]}, info={"speculative_num_draft_tokens": 10**9, "internal_states": [{}]})
def test_bench_on_any_reply(server, capsys, gen, info):
    server.routes.update({"/generate": gen, "/get_server_info": info})
    rc = run_tool(
        "bench",
        bench.main,
        [
            "--url",
            server.url,
            "--quiet",
            "--warmup",
            "1",
            "--concurrency",
            "1",
            "--num-prompts",
            "1",
            "--max-new-tokens",
            "2",
        ],
    )
    _ok(rc, capsys, server.url)


def _dump_dir(root: Path) -> Path:
    d = root / "dump"
    (d / "manifests").mkdir(parents=True)
    (d / "status").mkdir()
    (d / "dump_meta.json").write_text("{}")
    return d


@SETTINGS
@given(gen=generate_replies, info=info_replies)
@example(gen=[1], info={})
def test_dump_run_on_any_reply(server, capsys, gen, info):
    server.routes.update({"/generate": gen, "/get_server_info": info})
    with tempfile.TemporaryDirectory() as tmp:
        d = _dump_dir(Path(tmp))
        data = Path(tmp) / "d.jsonl"
        data.write_text(json.dumps({"id": "a", "input_ids": [1, 2]}) + "\n")
        rc = run_tool(
            "dump",
            client.main,
            [
                "run",
                "--url",
                server.url,
                "--data",
                str(data),
                "--dump-dir",
                str(d),
                "--generate",
                "--quiet",
                "--wait-s",
                "0",
            ],
        )
    _ok(rc, capsys, server.url)


record = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=4) | json_values, "file": st.just("samples/a.safetensors") | json_values},
    optional={"num_tokens": counts, "bytes": counts},
)
manifest_lines = st.lists(
    record.map(json.dumps) | record.map(json.dumps) | json_values.map(json.dumps) | st.text(max_size=20), max_size=4
)


@SETTINGS
@given(
    lines=manifest_lines,
    torn=st.booleans(),
    status=st.dictionaries(
        st.sampled_from(["dp0", "dp1"]),
        json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "state": st.sampled_from(["dumping", "stopped", "discarding"]) | json_values,
                "error": json_values,
                "stats": st.dictionaries(st.sampled_from(["written", "skipped_multimodal"]), counts) | json_values,
            },
        ),
        max_size=2,
    ),
)
@example(lines=['{"id": "a", "file": "x", "bytes": null}'], torn=False, status={})
def test_dump_status_on_any_manifest_and_status_file(capsys, lines, torn, status):
    with tempfile.TemporaryDirectory() as tmp:
        d = _dump_dir(Path(tmp))
        text = "\n".join(lines) + ("" if torn else "\n")
        (d / "manifests" / "dp0.jsonl").write_text(text)
        for name, obj in status.items():
            (d / "status" / f"{name}.json").write_text(json.dumps(obj))
        before = sorted(p.relative_to(d) for p in d.rglob("*"))
        rc = run_tool("dump", client.main, ["status", "--dump-dir", str(d)])
        assert sorted(p.relative_to(d) for p in d.rglob("*")) == before
    _ok(rc, capsys, d)


turn = (
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant"]) | json_values,
            "from": st.sampled_from(["human", "gpt"]) | json_values,
            "content": st.text(max_size=3) | json_values,
            "value": st.text(max_size=3) | json_values,
        },
    )
    | json_values
)
prompt_record = st.one_of(
    st.fixed_dictionaries({"input_ids": st.lists(st.integers(-2, 9) | json_values, max_size=3) | json_values}),
    st.fixed_dictionaries({"text": st.text(max_size=3) | json_values}),
    st.fixed_dictionaries({"prompt": st.text(max_size=3) | json_values}),
    st.fixed_dictionaries({"messages": st.lists(turn, max_size=2) | json_values}),
    st.fixed_dictionaries({"conversations": st.lists(turn, max_size=2) | json_values}),
    st.fixed_dictionaries({"turns": st.lists(st.text(max_size=3) | json_values, max_size=2) | json_values}),
    st.fixed_dictionaries(
        {
            "id": json_values,
            "loss_mask": st.lists(counts, max_size=2) | json_values,
            "input_ids": st.lists(st.integers(0, 9), min_size=1, max_size=2),
        }
    ),
    json_values,
)
records_jsonl = st.lists(prompt_record.map(json.dumps), min_size=1, max_size=3).map("\n".join)
prompt_files = st.one_of(
    records_jsonl,
    records_jsonl,
    st.lists(prompt_record, max_size=3).map(json.dumps),
    st.lists(prompt_record.map(json.dumps) | st.text(max_size=12), max_size=3).map("\n".join),
    st.binary(max_size=12).map(lambda b: b.decode("latin-1")),
)


@settings(SETTINGS, max_examples=120)
@given(content=prompt_files)
@example(content='{"messages": ["x"]}')
@example(content='{"input_ids": [1], "text": {"a": 1}}\n{"input_ids": [1], "id": {"b": 2}}')
def test_bench_and_dump_run_on_any_prompt_file(server, capsys, content):
    server.routes.update({"/generate": {"output_ids": [1]}, "/get_server_info": {}})
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "p.jsonl"
        p.write_text(content)
        rc = run_tool(
            "bench",
            bench.main,
            [
                "--url",
                server.url,
                "--quiet",
                "--warmup",
                "0",
                "--concurrency",
                "1",
                "--prompts",
                str(p),
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "1",
            ],
        )
        _ok(rc, capsys, p)
        rc = run_tool(
            "dump",
            client.main,
            [
                "run",
                "--url",
                server.url,
                "--data",
                str(p),
                "--dump-dir",
                str(_dump_dir(Path(tmp))),
                "--quiet",
                "--wait-s",
                "0",
            ],
        )
        _ok(rc, capsys, p)
