"""`sglang-eagle3 eval`'s figures on SGLang's definitions and the command's trust rules on CPU: the headline accept
length is SGLang's avg_spec_accept_length (accepted drafts + 1 per verify round, uncut), the per-request one
(tokens / rounds) beside it; a served reply no server can give is flagged; the server's sliding-window draft
attention is refused; local inputs are checked before any connection; a dump of other shapes, huge flags and a
dry run answer at once."""

from __future__ import annotations

import json
import socket
import threading
import time

import acceptance_world as W
import pytest
from helpers import assert_names_its_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.acceptance.stats import Walk, histogram_accept_length, regions
from sglang_eagle3_ext.cli.common import run_tool


def _eval(argv, capsys) -> tuple[int, str, str]:
    from sglang_eagle3_ext.cli.eval import main

    rc = run_tool("eval", main, [str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return W.eval_world(tmp_path_factory.mktemp("eval_figures"), 4)


# ---------------------------------------------------------------------------------------- the definition


def perfect_walk(prompt: int, generated: int, steps: int) -> Walk:
    """The rounds of a draft the target accepts every token of, over one response of `generated` tokens."""
    L = prompt + generated
    mask = [0] * prompt + [1] * generated
    known = [0] * L
    for c in range(L):  # anchor a = c + 1: how many of x_{a+1}.. lie in the region
        a = c + 1
        known[c] = sum(1 for j in range(1, steps + 1) if a + j < L and all(mask[a + i] for i in range(1, j + 1)))
    w = Walk(steps)
    w.add(known, known, mask)
    return w


@pytest.mark.parametrize("generated, per_request", [(10, 10 / 3), (33, 33 / 8), (4, 4.0), (6, 3.0)])
def test_a_perfect_draft_at_3_steps_reads_4_whatever_the_length(generated, per_request):
    """SGLang counts accepted drafts + 1 per round and never cuts the last round at max_new_tokens: 4.00.
    Tokens / rounds reads 3.33 for 10 tokens and 4.125 (above steps + 1) for 33."""
    w = perfect_walk(5, generated, 3)
    assert w.as_sglang_reports() == 4.0
    assert w.per_request() == pytest.approx(per_request)


@settings(max_examples=60, deadline=None)
@given(steps=st.integers(1, 6), extra=st.integers(1, 80), prompt=st.integers(1, 8))
def test_the_headline_stays_in_what_a_server_can_report(steps, extra, prompt):
    """A perfect draft gives steps + 1 for any response long enough to judge every position once."""
    w = perfect_walk(prompt, steps + extra, steps)
    assert w.as_sglang_reports() == steps + 1
    assert 1.0 <= w.per_request() <= steps + 2


def test_regions_are_walked_as_requests():
    assert regions([0, 0, 1, 1, 1, 0, 1, 1]) == [(2, 4), (6, 7)]
    assert histogram_accept_length([2, 4, 4, 2]) == 1 + (4 + 8 + 6) / 12 and histogram_accept_length([]) is None


# ---------------------------------------------------------------------------------------- --url


def _reply_for(seqs, prompt_len: int, meta: dict):
    def reply(body):
        n = body["sampling_params"]["max_new_tokens"]
        full = next(s for s in seqs if s[:prompt_len] == body["input_ids"])
        return {"output_ids": full[prompt_len : prompt_len + n], "meta_info": {"completion_tokens": n, **meta}}

    return reply


def _served(world, tmp_path, capsys, meta: dict, info: dict | None = None):
    from trust_client_servers import Replies

    seqs = world["seqs"][:2]
    if "served_export" not in world:  # the same export for every reply (eval only reads it)
        masks = [[0] * 4 + [1] * (len(s) - 4) for s in seqs]
        world["served_export"] = W.write_export(tmp_path / "ex", seqs, world["target"], masks=masks)
        capsys.readouterr()  # the dataset writer's progress bar
    ex = world["served_export"]
    info = info or {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "speculative_draft_model_path": str(world["draft"]),
        "internal_states": [{"avg_spec_accept_length": 2.5}],
    }
    srv = Replies({"/generate": _reply_for(seqs, 4, meta), "/get_server_info": info})
    try:
        rc, out, err = _eval(
            [
                "--draft",
                world["draft"],
                "--data",
                ex,
                "--heldout-fraction",
                "1",
                "--url",
                srv.url,
                "--concurrency",
                1,
                "--json",
                "-",
                "--dtype",
                "fp32",
                "--device",
                "cpu",
            ],
            capsys,
        )
    finally:
        srv.close()
    return rc, (json.loads(out) if out.strip() else None), err, srv


def test_served_figure_is_sglangs_and_names_the_served_draft(world, tmp_path, capsys):
    rc, rep, err, _ = _served(
        world,
        tmp_path,
        capsys,
        {"spec_verify_ct": 6, "spec_num_correct_drafts": 9, "spec_accept_histogram": [1, 2, 2, 1]},
    )
    assert rc == 0, err
    s = rep["served"]
    assert s["accept_length"] == 2.5 and s["server_avg_spec_accept_length"] == 2.5 and s["implausible"] == []
    assert s["draft"] == str(world["draft"]) and s["draft_is_evaluated_draft"] is True
    assert rep["predicted_accept_length"] == 2.0 and s["difference"] == -0.5
    assert s["difference_per_request"] == pytest.approx(
        rep["predicted_accept_length_per_request"] - s["accept_length_per_request"]
    )


IMPLAUSIBLE = {
    "more_drafts_than_steps": ({"spec_verify_ct": 6, "spec_accept_histogram": [0, 0, 0, 0, 6]}, "more than 3"),
    "histogram_vs_verify_ct": ({"spec_verify_ct": 9, "spec_accept_histogram": [1, 2, 2, 1]}, "spec_verify_ct 18"),
    "tokens_vs_rounds": ({"spec_verify_ct": 1, "spec_accept_histogram": [0, 0, 0, 1]}, "completion tokens"),
    "drafts_vs_histogram": (
        {"spec_verify_ct": 6, "spec_num_correct_drafts": 1, "spec_accept_histogram": [1, 2, 2, 1]},
        "spec_num_correct_drafts",
    ),
}


@pytest.mark.parametrize("case", sorted(IMPLAUSIBLE))
def test_a_reply_no_server_can_give_is_flagged(world, tmp_path, capsys, case):
    meta, needle = IMPLAUSIBLE[case]
    rc, rep, err, _ = _served(world, tmp_path, capsys, meta)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "served.implausible" in lines[0] and any(needle in x for x in rep["served"]["implausible"]), rep


def test_a_lifetime_figure_out_of_range_is_flagged(world, tmp_path, capsys):
    info = {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "internal_states": [{"avg_spec_accept_length": 7.5}],
    }
    rc, rep, err, _ = _served(
        world, tmp_path, capsys, {"spec_verify_ct": 6, "spec_accept_histogram": [1, 2, 2, 1]}, info
    )
    assert rc == 2 and "avg_spec_accept_length 7.5" in err and rep["served"]["draft"] is None, err


def test_sliding_window_draft_attention_is_refused(world, tmp_path, capsys):
    info = {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "speculative_draft_window_size": 256,
    }
    rc, rep, err, srv = _served(world, tmp_path, capsys, {"spec_verify_ct": 6}, info)
    assert rc == 2 and "--speculative-draft-window-size 256" in err and len(err.strip().splitlines()) == 1, err
    assert srv.posts == []  # refused before any request


def test_the_flag_itself_is_no_eval_option(world, capsys):
    rc, _, err = _eval(
        ["--draft", world["draft"], "--data", world["export"], "--speculative-draft-window-size", "256"], capsys
    )
    assert rc == 2 and "--speculative-draft-window-size" in err


NUMS = st.one_of(st.integers(-3, 60), st.floats(allow_nan=True), st.text(max_size=3), st.none())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    verify=NUMS,
    drafts=NUMS,
    hist=st.one_of(st.lists(st.integers(-2, 40), max_size=7), NUMS),
    avg=NUMS,
    window=st.sampled_from([None, None, 0, 64, "x"]),
)
def test_any_server_reply_exits_0_or_2_and_0_only_when_plausible(
    world, tmp_path_factory, capsys, verify, drafts, hist, avg, window
):
    meta = {
        k: v
        for k, v in (("spec_verify_ct", verify), ("spec_num_correct_drafts", drafts), ("spec_accept_histogram", hist))
        if v is not None
    }
    info = {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "internal_states": [{"avg_spec_accept_length": avg}],
    }
    if window is not None:
        info["speculative_draft_window_size"] = window
    rc, rep, err, srv = _served(world, tmp_path_factory.mktemp("reply"), capsys, meta, info)
    assert rc in (0, 2) and "Traceback" not in err and "a bug" not in err, err
    if rc == 0:
        s = rep["served"]
        assert 1.0 <= s["accept_length"] <= 4.0 and s["implausible"] == []
        assert s["server_avg_spec_accept_length"] is None or 1.0 <= s["server_avg_spec_accept_length"] <= 4.0
    else:
        assert len(err.strip().splitlines()) == 1, err
        assert_names_its_input(err, srv.url)


class Silent:
    """A port that accepts connections and never answers; counts them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections, self.held = 0, []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.held.append(c)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.mark.parametrize("bad", ["draft", "data", "json"])
def test_local_inputs_are_checked_before_the_server_is_asked(world, tmp_path, capsys, bad):
    srv = Silent()
    argv = {"--draft": world["draft"], "--data": world["export"], "--json": tmp_path / "report.json"}
    argv[f"--{bad}"] = tmp_path / "missing" / ("report.json" if bad == "json" else "")
    try:
        t0 = time.monotonic()
        rc, _, err = _eval(
            [*[x for kv in argv.items() for x in kv], "--url", srv.url, "--timeout", 120, "--device", "cpu"], capsys
        )
        took = time.monotonic() - t0
    finally:
        srv.close()
    # asking the silent server would take its 120 s timeout; 60 s holds at load 8 on 2 cores
    assert rc == 2 and "missing" in err and srv.connections == 0 and took < 60, (err, took)


# ---------------------------------------------------------------------------------------- trust


def test_a_dump_of_another_width_or_vocab_exits_2_naming_the_file_and_the_sample(world, tmp_path, capsys):
    seqs = world["seqs"][:2]
    for key, value, needle in (("hidden_size", W.H * 2, f"{W.H * 2} wide"), ("vocab_size", W.V * 4, "vocabulary")):
        d = W.write_dump(tmp_path / key, seqs, world["target"], [3, 3])
        meta = json.loads((d / "dump_meta.json").read_text())
        (d / "dump_meta.json").write_text(json.dumps({**meta, key: value}))
        rc, _, err = _eval(
            ["--draft", world["draft"], "--data", d, "--heldout-fraction", "1", "--device", "cpu"], capsys
        )
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and needle in lines[0], err
        assert "'s000'" in lines[0] and "dump_meta.json" in lines[0] and str(d) in lines[0], err


def test_a_dump_token_past_the_targets_vocab_exits_2(world, tmp_path, capsys):
    seqs = [list(world["seqs"][0]), list(world["seqs"][1])]
    seqs[1][5] = W.V + 3
    d = W.write_dump(tmp_path / "big_id", seqs, world["target"], [3, 3])
    meta = json.loads((d / "dump_meta.json").read_text())
    (d / "dump_meta.json").write_text(json.dumps({**meta, "vocab_size": W.V * 4}))  # a dump that agrees with itself
    rc, _, err = _eval(["--draft", world["draft"], "--data", d, "--heldout-fraction", "1", "--device", "cpu"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@settings(max_examples=60, deadline=None)
@given(
    n_aux=st.integers(0, 8),
    width=st.integers(1, 8192),
    vocab=st.one_of(st.none(), st.integers(1, 1 << 20)),
    k=st.integers(1, 8),
    hidden=st.one_of(st.none(), st.integers(1, 8192)),
    want_vocab=st.one_of(st.none(), st.integers(1, 1 << 20)),
)
def test_dump_shapes_are_refused_exactly_when_they_disagree(n_aux, width, vocab, k, hidden, want_vocab):
    from sglang_eagle3_ext.acceptance.data import dump_shape_problem

    agree = n_aux == k and (hidden is None or width == hidden) and (not vocab or not want_vocab or vocab == want_vocab)
    problem = dump_shape_problem(n_aux, width, vocab, k, hidden, want_vocab)
    assert (problem is None) == agree
    assert problem is None or "dump_meta.json" in problem


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--steps", "100000"),
        ("--steps", "17"),
        ("--batch-tokens", "1e12"),
        ("--samples", str(10**12)),
        ("--concurrency", "100000"),
        ("--timeout", "1e30"),
        ("--draft-tokens", "1000000"),
    ],
)
def test_huge_flags_are_refused_up_front_within_the_stated_bounds(world, capsys, flag, value):
    from sglang_eagle3_ext.cli.eval import build_parser

    t0 = time.monotonic()
    rc, _, err = _eval(["--draft", world["draft"], "--data", world["export"], flag, value], capsys)
    # refused before any work (which would take minutes at these sizes); 30 s holds at load 8 on 2 cores
    assert rc == 2 and flag in err and time.monotonic() - t0 < 30, err
    helps = {a.option_strings[0]: a.help for a in build_parser()._actions if a.option_strings}
    assert any(ch.isdigit() for ch in helps[flag]), helps[flag]  # the bound is stated


def test_a_dry_run_answers_in_seconds_and_refuses_what_the_run_refuses(world, tmp_path, capsys):
    srv = Silent()
    try:
        t0 = time.monotonic()
        rc, out, err = _eval(
            [
                "--draft",
                world["draft"],
                "--data",
                world["export"],
                "--heldout-fraction",
                "1",
                "--samples",
                10**6,
                "--steps",
                16,
                "--url",
                srv.url,
                "--dry-run",
                "--json",
                "-",
                "--device",
                "cpu",
            ],
            capsys,
        )
        # a run of 10**6 samples would take hours; 60 s holds the plan at load 8 on 2 cores
        assert rc == 0 and time.monotonic() - t0 < 60 and srv.connections == 0, err
    finally:
        srv.close()
    rep = json.loads(out)
    assert rep["dry_run"] is True and rep["heldout"]["samples"] == 4 and "predicted_accept_length" not in rep
    rc, _, err = _eval(["--draft", world["draft"], "--data", world["export"], "--topk", 2, "--dry-run"], capsys)
    assert rc == 2 and "topk 1 only" in err
