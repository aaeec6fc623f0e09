"""`sglang-eagle3 swap` against a loopback server answering as a SGLang server with the package active would:
the draft is checked here first (a bad draft is refused, exit 2, and nothing is sent), a release without the
mechanism and a server without the package are refused before anything is sent, the server's refusal is exit 2
with its reason, a swap that went through reports its pause. Replies of any shape: exit 0 or 2, never 3."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.draft.swap import LOAD_FORMAT, PROTOCOL, STATE_KEY
from sglang_eagle3_ext.draft.swap_client import draft_states, swap_reply

from cli_fixtures import sg  # noqa: F401
from loopback_server import FakeServer

pytest.importorskip("speculators")
AUX = (2, 4, 6)
RELEASE = "0.5.16"


def _draft(root, name, **kw):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return convert(make_speculators_draft(root / f"{name}_spec", **{"aux_ids": AUX, **kw}), root / name,
                   sglang_version=RELEASE, log=lambda *_: None)


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    from sglang_eagle3_ext.tiny.llama_draft import make_variant, write_target_config

    root = tmp_path_factory.mktemp("swap_client")
    out = {"target": write_target_config(root / "target"), "served": _draft(root, "served"),
           "new": _draft(root, "new", seed=1), "other_layers": _draft(root, "other_layers", aux_ids=(1, 3, 5)),
           "other_vocab": _draft(root, "other_vocab", draft_vocab=32)}
    for variant in ("fc_1xH", "nan_weight"):
        out[variant] = make_variant(out["new"], variant, root / variant)[1]
    return out


def _report(served) -> dict:
    """The draft report a scheduler serving `served` sends (draft/swap.state_report), for the 8-layer target."""
    from sglang_eagle3_ext.draft import keys, rules
    from sglang_eagle3_ext.draft.swap_rules import summary

    cfg = json.loads((served / "config.json").read_text())
    spec, _ = rules.spec_from_config(cfg, keys.layout_for_version(RELEASE))
    return {"protocol": PROTOCOL, "draft": str(served), "swaps": 0, "last_swap": None, "load_format": LOAD_FORMAT,
            **summary(spec, cfg), "hf_indices": list(AUX), "target_layers": 8, "token_map": True}


@pytest.fixture
def server(drafts):
    """A server with the package active serving drafts['served']; a successful POST makes it serve the posted draft."""
    state = {"report": _report(drafts["served"]), "version": RELEASE}

    def info():
        if state["report"] is None:
            return {"model_path": str(drafts["target"]), "version": state["version"], "internal_states": [{}]}
        return {"model_path": str(drafts["target"]), "version": state["version"],
                "speculative_algorithm": "EAGLE3", "internal_states": [{"avg_spec_accept_length": 2.1,
                                                                        STATE_KEY: state["report"]}]}

    def update(body):
        state["report"] = {**state["report"], "draft": body["model_path"], "swaps": 1}
        return 200, {"success": True, "message": f"draft {body['model_path']} swapped in", "num_paused_requests": 0}

    srv = FakeServer(info, update)
    srv.state = state
    yield srv
    srv.close()


def test_swap_sends_the_checked_draft_and_reports_the_pause(server, drafts, capfd, tmp_path):
    out = tmp_path / "r.json"
    rc, stdout, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], "--json", out], capfd)
    assert rc == 0, err
    (body,) = server.posts
    assert body == {"model_path": str(drafts["new"].resolve()), "load_format": LOAD_FORMAT, "flush_cache": True}
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["pause_s"] >= 0 and rep["previous_draft"] == str(drafts["served"])
    assert rep["local_check"] == "passed" and rep["hf_indices"] == list(AUX)
    assert "now serves draft" in stdout and "pause:" in stdout


@pytest.mark.parametrize("name,words", [("fc_1xH", ["fc-unfused", "1x64"]), ("nan_weight", ["non-finite"]),
                                        ("other_layers", ["capture-layer-index", "captures [2, 4, 6]"]),
                                        ("other_vocab", ["swap-mismatch", "draft_vocab_size is 32"])])
def test_bad_draft_refused_here_nothing_sent(server, drafts, name, words, capfd):
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts[name]], capfd)
    assert rc == 2 and not server.posts, err
    (line,) = [ln for ln in err.splitlines() if "error:" in ln]
    assert line.startswith("sglang-eagle3 swap: error: draft ") and "nothing was sent" in line
    assert all(w in line for w in words), line


def test_release_without_the_mechanism_refused_naming_the_release(server, drafts, capfd):
    server.state["version"] = "0.5.10"
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"]], capfd)
    assert rc == 2 and not server.posts and "needs SGLang 0.5.14+" in err and "0.5.10" in err, err


def test_server_without_the_package_gets_nothing(server, drafts, capfd):
    """Such a server would take the request as a reload of its target: nothing may be sent."""
    server.state["report"] = None
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"]], capfd)
    assert rc == 2 and not server.posts and "SGLANG_EAGLE3_EXT=1" in err, err


def test_server_refusal_is_exit_2_with_its_reason(server, drafts, capfd, tmp_path):
    reason = "draft X refused, the served draft is unchanged: [non-finite] fc.weight has 3 NaN/Inf values " + "x" * 400
    server.update = lambda body: (400, {"success": False, "message": reason, "num_paused_requests": 0})
    out = tmp_path / "r.json"
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], "--json", out], capfd)
    assert rc == 2 and len(server.posts) == 1 and reason in err and "keeps serving" in err, err
    rep = json.loads(out.read_text())
    assert rep["ok"] is False and rep["server_message"] == reason and rep["pause_s"] >= 0


def test_accepted_but_not_served_is_refused(server, drafts, capfd):
    server.update = lambda body: (200, {"success": True, "message": "ok"})
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"]], capfd)
    assert rc == 2 and "reports serving" in err, err


def test_folder_only_on_the_server(server, drafts, capfd):
    rc, _, err = sg(["swap", "--url", server.url, "--draft", "/srv/drafts/new"], capfd)
    assert rc == 2 and not server.posts and "--no-local-check" in err, err
    rc, _, err = sg(["swap", "--url", server.url, "--draft", "/srv/drafts/new", "--no-local-check"], capfd)
    assert rc == 0 and server.posts[0]["model_path"] == "/srv/drafts/new", err


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
                    max_leaves=12)
REPLY_KEYS = st.sampled_from(["success", "message", "num_paused_requests"])


@settings(max_examples=200, deadline=None)
@given(reply=JSON | st.dictionaries(REPLY_KEYS, JSON, max_size=3))
def test_any_update_reply_is_read_or_refused(reply):
    from sglang_eagle3_ext.boundary import BadInput

    try:
        ok, msg, paused = swap_reply(reply, "POST u")
    except BadInput:
        return
    assert isinstance(ok, bool) and isinstance(msg, str) and isinstance(paused, int) and paused >= 0


STATE_KEYS = st.sampled_from(["protocol", "draft", "spec", "build", "hf_indices", "target_layers", "token_map", "refusal"])


@settings(max_examples=200, deadline=None)
@given(info=JSON | st.fixed_dictionaries({"internal_states": st.lists(
    st.fixed_dictionaries({STATE_KEY: JSON | st.dictionaries(STATE_KEYS, JSON)}), max_size=2)}))
def test_any_server_info_is_read_or_refused(info):
    from sglang_eagle3_ext.boundary import BadInput

    try:
        states = draft_states(info, "GET i")
    except BadInput:
        return
    assert states is None or all(isinstance(s, dict) for s in states)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=JSON | st.dictionaries(REPLY_KEYS, JSON, max_size=3), status=st.sampled_from([200, 400, 422, 500]))
def test_any_reply_is_exit_0_or_2(server, drafts, capfd, reply, status):
    server.update = lambda body: (status, reply)
    rc, _, err = sg(["swap", "--url", server.url, "--draft", str(drafts["new"]), "--no-local-check"], capfd)
    assert rc in (0, 2) and "Traceback" not in err, err
