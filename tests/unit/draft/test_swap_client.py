"""`sglang-eagle3 swap` against a loopback server answering as a SGLang server with the package active would:
the draft is checked here first (a bad draft is refused, exit 2, and nothing is sent), a release without the
mechanism and a server without the package are refused before anything is sent, the server's refusal is exit 2
with its reason, a swap that went through reports its pause. Replies of any shape: exit 0 or 2, never 3."""

from __future__ import annotations

import json

import pytest
from cli_fixtures import sg
from helpers import assert_names_its_input, edited_draft
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from loopback_server import FakeServer

from sglang_eagle3_ext.draft.swap.client import draft_states, swap_reply
from sglang_eagle3_ext.draft.swap.protocol import LOAD_FORMAT, PROTOCOL, STATE_KEY

pytest.importorskip("speculators")
AUX = (2, 4, 6)
RELEASE = "0.5.16"


def _draft(root, name, **kw):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return convert(
        make_speculators_draft(root / f"{name}_spec", **{"aux_ids": AUX, **kw}),
        root / name,
        sglang_version=RELEASE,
        log=lambda *_: None,
    )


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    from malformed_drafts import make_variant

    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    root = tmp_path_factory.mktemp("swap_client")
    out = {
        "target": write_target_config(root / "target"),
        "served": _draft(root, "served"),
        "new": _draft(root, "new", seed=1),
        "other_layers": _draft(root, "other_layers", aux_ids=(1, 3, 5)),
        "other_vocab": _draft(root, "other_vocab", draft_vocab=32),
    }
    for variant in ("fc_1xH", "nan_weight"):
        out[variant] = make_variant(out["new"], variant, root / variant)[1]
    return out


def _report(served) -> dict:
    """The draft report a scheduler serving `served` sends (in_server/draft/swap.state_report), for the 8-layer target."""
    from sglang_eagle3_ext.draft import keys, rules
    from sglang_eagle3_ext.draft.swap.rules import summary

    cfg = json.loads((served / "config.json").read_text())
    spec, _ = rules.spec_from_config(cfg, keys.layout_for_version(RELEASE))
    return {
        "protocol": PROTOCOL,
        "draft": str(served),
        "swaps": 0,
        "last_swap": None,
        "attempts": 0,
        "last_attempt": None,
        "load_format": LOAD_FORMAT,
        **summary(spec, cfg),
        "hf_indices": list(AUX),
        "target_layers": 8,
        "token_map": True,
    }


@pytest.fixture
def server(drafts):
    """A server with the package active serving drafts['served']; a successful POST makes it serve the posted draft."""
    state = {"report": _report(drafts["served"]), "version": RELEASE, "record": str(drafts["served"])}

    def info():
        if state["report"] is None:
            return {"model_path": str(drafts["target"]), "version": state["version"], "internal_states": [{}]}
        return {
            "model_path": str(drafts["target"]),
            "version": state["version"],
            "speculative_algorithm": state.get("algorithm", "EAGLE3"),
            "speculative_draft_model_path": state["record"],
            "internal_states": [{"avg_spec_accept_length": 2.1, STATE_KEY: state["report"]}],
        }

    def update(body):
        swapped(body["model_path"])
        return 200, {"success": True, "message": f"draft {body['model_path']} swapped in", "num_paused_requests": 0}

    def swapped(path, ok=True, message=""):
        """What the server's scheduler and tokenizer manager note after a swap of `path`."""
        r = state["report"]
        state["report"] = {
            **r,
            "attempts": r.get("attempts", 0) + 1,
            "last_attempt": {"path": path, "ok": ok, "message": message},
        }
        if ok:
            state["report"].update(draft=path, swaps=r.get("swaps", 0) + 1)
            state["record"] = path

    srv = FakeServer(info, update)
    srv.state, srv.swapped = state, swapped
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


@pytest.mark.parametrize(
    "name,words",
    [
        ("fc_1xH", ["fc-unfused", "1x64"]),
        ("nan_weight", ["non-finite"]),
        ("other_layers", ["capture-layer-index", "captures [2, 4, 6]"]),
        ("other_vocab", ["swap-mismatch", "draft_vocab_size is 32"]),
    ],
)
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


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=12,
)
REPLY_KEYS = st.sampled_from(["success", "message", "num_paused_requests"])


@settings(max_examples=200, deadline=None)
@given(reply=JSON | st.dictionaries(REPLY_KEYS, JSON, max_size=3))
def test_any_update_reply_is_read_or_refused(reply):
    from sglang_eagle3_ext.boundary import BadInput

    try:
        ok, msg, paused = swap_reply(reply, "POST u")
    except BadInput as e:
        assert_names_its_input(e, "POST u")
        return
    assert isinstance(ok, bool) and isinstance(msg, str) and isinstance(paused, int) and paused >= 0


STATE_KEYS = st.sampled_from(
    ["protocol", "draft", "spec", "build", "hf_indices", "target_layers", "token_map", "refusal"]
)


@settings(max_examples=200, deadline=None)
@given(
    info=JSON
    | st.fixed_dictionaries(
        {
            "internal_states": st.lists(
                st.fixed_dictionaries({STATE_KEY: JSON | st.dictionaries(STATE_KEYS, JSON)}), max_size=2
            )
        }
    )
)
def test_any_server_info_is_read_or_refused(info):
    from sglang_eagle3_ext.boundary import BadInput

    try:
        states = draft_states(info, "GET i")
    except BadInput as e:
        assert_names_its_input(e, "GET i")
        return
    assert states is None or all(isinstance(s, dict) for s in states)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=JSON | st.dictionaries(REPLY_KEYS, JSON, max_size=3), status=st.sampled_from([200, 400, 422, 500]))
@example(reply={"success": False}, status=200)  # a refusal without a reason still names the server
@example(reply={"success": True}, status=200)  # accepted, yet the old draft serves: names the server
def test_any_reply_is_exit_0_or_2(server, drafts, capfd, reply, status):
    server.update = lambda body: (status, reply)
    rc, _, err = sg(["swap", "--url", server.url, "--draft", str(drafts["new"]), "--no-local-check"], capfd)
    assert rc in (0, 2) and "Traceback" not in err, err
    if rc == 2:
        assert_names_its_input(err, server.url)


# ---- a draft built otherwise; SGLang's record and a restart; a lost reply; local inputs first ------------------


def test_a_draft_differing_in_a_build_key_is_refused_here(server, drafts, capfd, tmp_path):
    """The keys the server reports (build_keys: those its release's draft class reads) are compared here too."""
    new = edited_draft(drafts["new"], tmp_path / "neox", rope_is_neox_style=False)
    rc, _, err = sg(["swap", "--url", server.url, "--draft", new], capfd)
    assert rc == 2 and not server.posts, err
    assert "config rope_is_neox_style is False, the served draft's is unset" in err and "restart to serve it" in err
    server.state["report"]["build_keys"] = ["rope_theta"]  # a release whose class reads no such key
    rc, _, err = sg(["swap", "--url", server.url, "--draft", new], capfd)
    assert rc == 0, err


def test_the_server_record_and_the_launch_argument_name_the_new_draft(server, drafts, capfd, tmp_path):
    out = tmp_path / "r.json"
    rc, stdout, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], "--json", out], capfd)
    assert rc == 0, err
    rep = json.loads(out.read_text())
    new = str(drafts["new"].resolve())
    assert rep["server_record"] == new and rep["launch_argument"] == f"--speculative-draft-model-path {new}"
    assert f"--speculative-draft-model-path {new}" in stdout


def test_a_stale_server_record_is_said(server, drafts, capfd):
    """A server whose package predates the record update still names the old draft: said, not hidden."""
    server.update = lambda body: (
        (server.swapped(body["model_path"]), server.state.update(record=str(drafts["served"])))[0]
        or (200, {"success": True, "message": "ok"})
    )
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"]], capfd)
    assert rc == 0 and "still names" in err and str(drafts["served"]) in err, err


def test_draft_link_points_at_the_new_draft_only_once_it_serves(server, drafts, capfd, tmp_path):
    link = tmp_path / "serving-draft"
    link.symlink_to(drafts["served"])
    server.update = lambda body: (400, {"success": False, "message": "[non-finite] no", "num_paused_requests": 0})
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], "--draft-link", link], capfd)
    assert rc == 2 and link.resolve() == drafts["served"].resolve(), err  # refused: the link is untouched
    server.update = lambda body: (server.swapped(body["model_path"]), (200, {"success": True, "message": "ok"}))[1]
    rc, stdout, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], "--draft-link", link], capfd)
    assert rc == 0, err
    assert link.is_symlink() and link.resolve() == drafts["new"].resolve()
    assert f"--speculative-draft-model-path {link}" in stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary link left


def test_draft_link_made_where_there_was_none(server, drafts, capfd, tmp_path):
    link = tmp_path / "serving-draft"
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], "--draft-link", link], capfd)
    assert rc == 0 and link.resolve() == drafts["new"].resolve(), err


@pytest.mark.parametrize(
    "case",
    [
        "json_folder_missing",
        "json_is_folder",
        "link_folder_missing",
        "link_is_folder",
        "link_is_file",
        "draft_missing",
        "draft_bad",
    ],
)
def test_local_inputs_and_outputs_are_checked_before_the_server_is_contacted(server, drafts, capfd, tmp_path, case):
    """Whatever is wrong here is found before the first request: the server is not asked, nothing is sent."""
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("mine")
    argv = ["swap", "--url", server.url, "--draft", drafts["new"]]
    extra, words = {
        "json_folder_missing": (["--json", tmp_path / "a_file" / "r.json"], "is a file, not a folder"),
        "json_is_folder": (["--json", tmp_path / "a_folder"], "is a folder"),
        "link_folder_missing": (["--draft-link", tmp_path / "nowhere" / "link"], "no folder"),
        "link_is_folder": (["--draft-link", tmp_path / "a_folder"], "not a symlink"),
        "link_is_file": (["--draft-link", tmp_path / "a_file"], "not a symlink"),
        "draft_missing": (["--draft", tmp_path / "no_draft"], "no such folder"),
        "draft_bad": (["--draft", drafts["nan_weight"]], "non-finite"),
    }[case]
    rc, _, err = sg(argv + extra, capfd)
    assert rc == 2 and words in err, err
    assert server.gets == [] and server.posts == [], case
    assert (tmp_path / "a_file").read_text() == "mine" and (tmp_path / "a_folder").is_dir()


def test_a_relative_path_without_local_check_is_refused_before_sending(server, capfd):
    rc, _, err = sg(["swap", "--url", server.url, "--draft", "drafts/new", "--no-local-check"], capfd)
    assert rc == 2 and "absolute path" in err and server.gets == [] and not server.posts, err


def _late(server, then, delay=1.5):
    """The server answers the POST `delay` s later (long requests in flight), after doing `then(path)`."""
    import time

    def update(body):
        time.sleep(delay)
        return then(body["model_path"])

    server.update = update


def _swap_past_the_timeout(server, drafts, capfd, link, settle: str, *extra):
    """`swap` of drafts['new'] whose client gives up on the POST after 0.3 s, then waits `settle` s for the server."""
    argv = ["swap", "--url", server.url, "--draft", drafts["new"], "--timeout", "0.3", "--settle", settle]
    return sg([*argv, "--draft-link", link, *extra], capfd)


def test_a_swap_finishing_after_the_client_timeout_is_reported_done(server, drafts, capfd, tmp_path):
    link = tmp_path / "serving-draft"
    out = tmp_path / "r.json"
    _late(server, lambda p: (server.swapped(p), (200, {"success": True, "message": "ok"}))[1])
    rc, stdout, err = _swap_past_the_timeout(server, drafts, capfd, link, "20", "--json", out)
    assert rc == 0, err
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["reply_lost"] and rep["pause_s"] is None and "no complete answer" in rep["reply_lost"]
    assert link.resolve() == drafts["new"].resolve() and "after the client's timeout" in err


def test_a_refusal_after_the_client_timeout_is_the_servers_reason(server, drafts, capfd, tmp_path):
    link = tmp_path / "serving-draft"
    link.symlink_to(drafts["served"])
    reason = "draft X refused, the served draft is unchanged: [shape-mismatch] fc.weight"

    def refuse(p):
        server.swapped(p, ok=False, message=reason)
        return 400, {"success": False, "message": reason}

    _late(server, refuse)
    rc, _, err = _swap_past_the_timeout(server, drafts, capfd, link, "20")
    assert rc == 2 and reason in err and "after the client's timeout" in err, err
    assert link.resolve() == drafts["served"].resolve()


def test_a_swap_still_pending_after_settle_is_not_called_a_failure(server, drafts, capfd, tmp_path):
    link = tmp_path / "serving-draft"
    link.symlink_to(drafts["served"])
    out = tmp_path / "r.json"
    _late(server, lambda p: (server.swapped(p), (200, {"success": True, "message": "ok"}))[1], delay=3)
    rc, _, err = _swap_past_the_timeout(server, drafts, capfd, link, "0.5", "--json", out)
    assert rc == 2 and "not confirmed" in err and "may still swap" in err, err
    assert json.loads(out.read_text())["state"] == "undetermined"
    assert link.resolve() == drafts["served"].resolve()


ATTEMPT_KEYS = st.sampled_from(["path", "ok", "message"])


@settings(max_examples=200, deadline=None)
@given(
    rep=st.fixed_dictionaries(
        {"protocol": st.just(PROTOCOL), "spec": st.just({})},
        optional={
            k: JSON
            for k in ("draft", "build", "build_keys", "hf_indices", "target_layers", "token_map", "swaps", "attempts")
        },
    ),
    last=st.none() | JSON | st.dictionaries(ATTEMPT_KEYS, JSON),
)
def test_any_draft_report_is_read_or_refused(rep, last):
    """The fields a swap decides on (build keys, the last attempt, HF indices against the target's layers)."""
    from sglang_eagle3_ext.boundary import BadInput

    rep = {**rep, "last_attempt": last}
    try:
        (state,) = draft_states({"internal_states": [{STATE_KEY: rep}]}, "GET i")
    except BadInput as e:
        assert_names_its_input(e, "GET i")
        return
    assert all(isinstance(k, str) for k in state.get("build_keys") or [])
    la = state.get("last_attempt")
    assert la is None or (isinstance(la["path"], str) and isinstance(la["ok"], bool) and isinstance(la["message"], str))
    if state["hf_indices"] and state["target_layers"]:
        assert max(state["hf_indices"]) <= state["target_layers"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(after=JSON | st.fixed_dictionaries({"speculative_draft_model_path": JSON, "internal_states": JSON}))
def test_any_server_info_after_the_swap_is_exit_0_or_2(server, drafts, capfd, after):
    """What the server says after accepting (its draft reports, its record): read or refused, never a traceback."""
    first = server.info

    def update(body):
        server.info = lambda: after
        return 200, {"success": True, "message": "ok"}

    server.update = update
    try:
        rc, _, err = sg(["swap", "--url", server.url, "--draft", str(drafts["new"]), "--no-local-check"], capfd)
    finally:
        server.info = first
    assert rc in (0, 2) and "Traceback" not in err, err
    if rc == 2:
        assert_names_its_input(err, server.url)


@pytest.mark.parametrize(
    "flag,value", [("--settle", "1e9"), ("--timeout", "1e12"), ("--settle", "nan"), ("--timeout", "0")]
)
def test_waits_are_bounded_up_front(server, drafts, capfd, flag, value):
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"], flag, value], capfd)
    assert rc == 2 and flag in err and server.gets == [] and not server.posts, err


def test_a_dflash_server_is_refused_naming_the_restart(server, drafts, capfd):
    """SGLang's DFLASH worker keeps its draft for life: one line, nothing sent."""
    server.state["algorithm"] = "DFLASH"
    rc, _, err = sg(["swap", "--url", server.url, "--draft", drafts["new"]], capfd)
    assert rc == 2 and not server.posts, err
    (line,) = [ln for ln in err.splitlines() if "error:" in ln]
    assert "--speculative-algorithm DFLASH" in line and "--speculative-draft-model-path" in line, line


def test_a_dflash_draft_sent_to_an_eagle3_server_is_refused_here(server, drafts, capfd, tmp_path):
    from sglang_eagle3_ext.tiny.dflash_draft import make_dflash_draft

    d = make_dflash_draft(tmp_path / "dflash", hidden=64, vocab=128)
    rc, _, err = sg(["swap", "--url", server.url, "--draft", d], capfd)
    assert rc == 2 and not server.posts, err
    assert "served by --speculative-algorithm DFLASH, the server runs EAGLE3" in err, err
