"""`sglang-eagle3 tune` on CPU: the accept side from one simulation equals eval at every steps count, the cost
model on recorded Kimi-width timings, the least-squares fit recovering known parts, the preset writer through
launch's own loader and plan, the adaptive config through SGLang's own parser and slot, the refusals, the dry run,
and the timings reader under hypothesis."""

from __future__ import annotations

import json
import math
from pathlib import Path

import acceptance_world as W
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.boundary import BadInput
from sglang_eagle3_ext.cli.common import run_tool
from sglang_eagle3_ext.tune import adaptive, costmodel, preset, timings

FIXTURE = Path(__file__).with_name("tune_timings_kimi_width.json")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return W.eval_world(tmp_path_factory.mktemp("tune_world"), 12)


def _tune(argv, capsys):
    from sglang_eagle3_ext.cli.tune import main

    rc = run_tool("tune", main, [str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _base(world):
    return [
        "--target",
        world["target"],
        "--draft",
        world["draft"],
        "--data",
        world["export"],
        "--heldout-fraction",
        "1",
        "--device",
        "cpu",
    ]


# ------------------------------------------------------------------------------------------- accept side


def test_accept_by_steps_equals_eval_at_each_steps_count(world):
    """One simulation at 8 steps, clamped per steps count, gives exactly what eval reports at that count."""
    from sglang_eagle3_ext.acceptance.by_steps import accept_by_steps
    from sglang_eagle3_ext.acceptance.evaluate import EvalOptions, evaluate

    cfg = W.draft_config()
    draft = W.write_draft(world["root"] / "draft_random", cfg, W.draft_tensors(seed=7, copy=False, scale=1.0))
    o = EvalOptions(
        draft=str(draft),
        data=str(world["export"]),
        target=str(world["target"]),
        heldout_fraction=1.0,
        device="cpu",
        dtype="fp32",
    )
    got = accept_by_steps(o, 4)
    for n in range(1, 5):
        rep = evaluate(EvalOptions(**{**o.__dict__, "steps": n}))
        assert got["by_steps"][n] == pytest.approx(rep["predicted_accept_length"], abs=1e-12), n
        assert got["per_request"][n] == pytest.approx(rep["predicted_accept_length_per_request"], abs=1e-12), n
    assert "topk > 1" in got["trees"]


# ------------------------------------------------------------------------------------------- cost model


def test_least_squares_recovers_known_parts():
    target = {1: 3.0, 4: 3.2, 16: 3.8, 32: 4.6, 128: 9.0}
    draft, extend = {1: 0.7, 16: 0.9}, {1: 0.5, 16: 1.1}
    spec = [
        {
            "bs": bs,
            "steps": s,
            "accept_length": None,
            "iteration_ms": costmodel.interp(target, bs * (s + 1)) + s * draft[bs] + extend[bs],
        }
        for bs in (1, 16)
        for s in (1, 3, 5)
    ]
    m = costmodel.fit("x", {"target_step_ms": target, "spec": spec, "measured": []})
    for bs in (1, 16):
        assert m.parts[bs].draft_step == pytest.approx(draft[bs], abs=1e-9)
        assert m.parts[bs].extend == pytest.approx(extend[bs], abs=1e-9)
        assert m.parts[bs].residual_ms == pytest.approx(0, abs=1e-9)


def test_fit_needs_two_steps_counts():
    with pytest.raises(ValueError, match="two steps counts"):
        costmodel.fit(
            "x", {"target_step_ms": {1: 3.0}, "spec": [{"bs": 1, "steps": 3, "iteration_ms": 6.0}], "measured": []}
        )


def test_cost_model_on_recorded_kimi_width_timings():
    """docs/results.md at Kimi width: FlashMLA batch 16, 3 steps: 7.2 ms, accept 3.84 -> 1.4x the target's
    decode rate between admissions (the bench measured 1.58x end to end with 128:896 outputs); Triton's
    verify makes its iteration 1.4x FlashMLA's."""
    t = timings.read(FIXTURE)
    accept = {1: 1.9, 3: 3.84, 5: 4.27}
    fm, tr = costmodel.fit("flashmla", t["backends"]["flashmla"]), costmodel.fit("triton", t["backends"]["triton"])
    assert fm.iteration_ms(16, 3) == pytest.approx(7.2, rel=0.02)
    assert tr.iteration_ms(16, 3) / fm.iteration_ms(16, 3) == pytest.approx(10.1 / 7.2, rel=0.03)
    speedup = fm.tokens_per_s(16, 3, accept) / fm.tokens_per_s(16, 0, accept)
    assert 1.8 < speedup < 2.1  # between admissions: 3.84 x 3.75 / 7.2 = 2.0
    err = costmodel.errors(fm, t["backends"]["flashmla"], accept)
    assert err["iteration_in_sample"]["points"] == 6 and err["iteration_in_sample"]["max_abs"] < 0.05
    assert err["iteration_leave_one_out"]["points"] == 6
    assert err["tokens_per_s_end_to_end"]["points"] == 2
    rows = costmodel.grid({"flashmla": fm, "triton": tr}, accept, [1, 16])
    assert {(r["backend"], r["steps"], r["concurrency"]) for r in rows} >= {("triton", 0, 1), ("flashmla", 5, 16)}


# ------------------------------------------------------------------------------------------- timings reader


def test_timings_round_trip(tmp_path):
    t = timings.read(FIXTURE)
    p = timings.write(tmp_path / "t.json", t)
    assert timings.read(p) == t


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(allow_nan=True), st.text(max_size=8))
_json = st.recursive(
    _leaf,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_json, bs_key=st.text(max_size=8), steps=_leaf, ms=_leaf)
def test_timings_reader_accepts_or_names_the_key(obj, bs_key, steps, ms):
    """Anything else than a valid file is BadInput naming the file; never another exception."""
    cands = [
        obj,
        {"format": timings.FORMAT, "backends": obj},
        {
            "format": timings.FORMAT,
            "backends": {
                "fa3": {"target_step_ms": {bs_key: ms}, "spec": [{"bs": 1, "steps": steps, "iteration_ms": ms}]}
            },
        },
    ]
    for c in cands:
        try:
            t = timings.parse(c, "t.json")
        except BadInput as e:
            assert str(e).startswith("t.json") and "\n" not in str(e)
            continue
        for b in t["backends"].values():
            assert all(k >= 1 and 0 < v <= timings.MAX_MS and math.isfinite(v) for k, v in b["target_step_ms"].items())


# ------------------------------------------------------------------------------------------- adaptive config


@pytest.mark.sglang
def test_adaptive_config_is_read_by_sglangs_own_parser_and_settles_where_fitted(tmp_path):
    from sglang.srt.speculative.adaptive_spec_params import (
        AdaptiveSpeculativeParams,
        AdaptiveStepSlot,
        _load_adaptive_config,
    )

    accept = {0: 1.0, 1: 1.9, 2: 2.7, 3: 3.4, 4: 3.8, 5: 4.0}
    predicted = {1: {0: 280, 2: 520, 3: 560, 4: 555}, 16: {0: 3100, 1: 4300, 2: 4500, 3: 4400}}
    cfg = adaptive.fit_config({1: 3, 16: 2}, predicted, accept, initial=3)
    path = adaptive.write(tmp_path / "a.json", cfg)
    _, entries = _load_adaptive_config(str(path))
    assert sorted(entries) == [1, 16]
    params = AdaptiveSpeculativeParams(initial_steps=3, cfg_path=str(path))
    for bs, best in ((1, 3), (16, 2)):
        slot = params._route(bs)
        for _ in range(400):  # SGLang's own slot fed the mean accepted drafts at its current steps
            slot.update([accept[slot.current_steps] - 1.0])
        assert slot.current_steps == best, (bs, cfg[str(bs)])
        mine = adaptive.settle(
            cfg[str(bs)]["candidate_steps"], accept, 3, cfg[str(bs)]["up_hysteresis"], cfg[str(bs)]["down_hysteresis"]
        )
        assert mine == [best]
    # SGLang's default table, replayed by both
    for key, e in __import__(
        "sglang.srt.speculative.adaptive_spec_params", fromlist=["x"]
    ).DEFAULT_ADAPTIVE_CONFIG.items():
        slot = AdaptiveStepSlot(3, e)
        seen = []
        for _ in range(600):
            slot.update([max(accept[slot.current_steps] - 1.0, 0.0)] if slot.current_steps else [0])
            seen.append(slot.current_steps)
        assert set(seen[-40:]) <= set(
            adaptive.settle(e["candidate_steps"], accept, 3, e["up_hysteresis"], e["down_hysteresis"]) + [0]
        ), key


# ------------------------------------------------------------------------------------------- presets


@pytest.mark.sglang
def test_written_preset_loads_and_plans_with_the_tuned_flags(tmp_path, world):
    import subprocess
    import sys

    fields = preset.server_fields(str(world["target"]), str(world["draft"]), "flashmla", 5, max_running=16)
    p = preset.write(tmp_path / "tuned.yaml", fields, preset.header("t", "sglang-eagle3 tune ...", ["c=1: x"], []))
    assert p.read_text().startswith("# t\n")
    from sglang_eagle3_ext.launch import presets

    loaded = presets.load(path=p)
    assert loaded.server_args["speculative_num_steps"] == 5
    presets.check_values(loaded, presets.sglang_parser())
    r = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.launch_server", "--preset", str(p), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    for flag in (
        "--attention-backend flashmla",
        "--speculative-num-steps 5",
        "--speculative-num-draft-tokens 6",
        "--max-running-requests 16",
        "--speculative-eagle-topk 1",
    ):
        assert flag in r.stdout, (flag, r.stdout[-2000:])


# ------------------------------------------------------------------------------------------- command line


def test_full_run_on_recorded_timings_writes_presets_config_plot_and_report(world, tmp_path, capsys):
    out = tmp_path / "o"
    rc, stdout, err = _tune([*_base(world), "--timings", FIXTURE, "--no-measure", "--out", out, "--json", "-"], capsys)
    assert rc == 0, err
    rep = json.loads(stdout)
    assert set(rep["accept"]["by_steps"]) == {str(n) for n in range(1, 9)}
    assert set(rep["best"]) == {"1", "4", "16", "32"}
    assert all(b["source"] == "predicted" for b in rep["best"].values())
    assert rep["budget"]["servers_started"] == 0
    assert (out / "tuned-c1.yaml").is_file() and (out / "tune.json").is_file() and Path(rep["plot"]).is_file()
    assert rep["projection"]["assumptions"]
    if rep["adaptive"]["written"]:
        assert json.loads((out / "adaptive_config.json").read_text())["1"]["candidate_steps"]


def test_dry_run_plans_without_starting(world, tmp_path, capsys, caplog):
    plan = tmp_path / "plan.json"
    rc, stdout, err = _tune(
        [*_base(world), "--dry-run", "--out", tmp_path / "o", "--backends", "triton,flashmla", "--json", plan], capsys
    )
    assert rc == 0, err
    rep = json.loads(plan.read_text())
    assert rep["dry_run"] and not (tmp_path / "o").exists()
    by = {d["backend"]: d for d in rep["backends"]}
    assert by["triton"]["chosen"] and not by["flashmla"]["chosen"] and "MLA" in by["flashmla"]["reason"]
    assert any("--speculative-num-steps 3" in c for c in rep["timing_pass"]["commands"])
    # the text plan says each decision once, in words: no budget of None
    said = stdout + err + caplog.text
    assert [said.count(f"backend {b}:") for b in ("triton", "flashmla")] == [1, 1], said
    assert "budget: no limit" in stdout and "None" not in stdout, stdout


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--budget-min", "1"], "--budget-min 1: one timing pass needs at least"),
        (["--backends", "fa3,nonesuch"], "--backends nonesuch"),
    ],
)
def test_refusals_are_one_line_exit_2(world, tmp_path, capsys, extra, needle):
    rc, stdout, err = _tune([*_base(world), "--out", tmp_path / "o", *extra], capsys)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_no_dump_is_refused(world, tmp_path, capsys):
    argv = ["--target", world["target"], "--draft", world["draft"], "--data", tmp_path / "missing"]
    rc, _, err = _tune(argv, capsys)
    assert rc == 2 and "--data" in err and "no such folder" in err and len(err.strip().splitlines()) == 1


@pytest.mark.sglang
def test_backend_the_release_lacks_is_refused(world, tmp_path, capsys, monkeypatch):
    from sglang_eagle3_ext.tune import backends

    monkeypatch.setattr(backends, "release_choices", lambda: ["triton", "flashinfer"])
    rc, _, err = _tune([*_base(world), "--backends", "fa3,triton"], capsys)
    assert rc == 2 and "has no 'fa3'" in err and len(err.strip().splitlines()) == 1
