"""`eval --url` and a `--speculative-adaptive` server: its steps count moves with the batch, so its accept length is
no figure of the fixed --steps eval predicts; it is refused in one line before any request is sent."""

from __future__ import annotations

import acceptance_world as W
import pytest
from trust_client_servers import Replies

from sglang_eagle3_ext.cli.common import run_tool

INFO = {
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "internal_states": [{"avg_spec_accept_length": 2.5}],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return W.eval_world(tmp_path_factory.mktemp("eval_adaptive"), 2)


def _reply(body):
    n = body["sampling_params"]["max_new_tokens"]
    return {"output_ids": [1] * n, "meta_info": {"completion_tokens": n, "spec_verify_ct": n}}


def _eval_url(world, info, capsys):
    from sglang_eagle3_ext.cli.eval import main

    srv = Replies({"/generate": _reply, "/get_server_info": info})
    try:
        argv = ["--draft", world["draft"], "--data", world["export"], "--heldout-fraction", "1"]
        rc = run_tool("eval", main, [str(a) for a in [*argv, "--url", srv.url, "--concurrency", 1, "--json", "-"]])
    finally:
        srv.close()
    return rc, capsys.readouterr().err, srv


def test_an_adaptive_server_is_refused_before_any_request(world, capsys):
    rc, err, srv = _eval_url(world, {**INFO, "speculative_adaptive": True}, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--speculative-adaptive" in err and srv.url in err and "--steps" in err, err
    assert srv.posts == []


@pytest.mark.parametrize("value", ["yes", 1, [True]])
def test_a_malformed_adaptive_flag_is_named(world, capsys, value):
    rc, err, srv = _eval_url(world, {**INFO, "speculative_adaptive": value}, capsys)
    assert rc == 2 and "speculative_adaptive" in err and len(err.strip().splitlines()) == 1, err
    assert srv.posts == []


def test_a_fixed_steps_server_is_still_asked(world, capsys):
    _, _, srv = _eval_url(world, {**INFO, "speculative_adaptive": False}, capsys)
    assert srv.posts  # not refused for its settings
