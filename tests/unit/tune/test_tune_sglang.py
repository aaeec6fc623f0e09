"""`tune` against the installed SGLang's own code on CPU: its server commands spelled and parsed by SGLang's parser
(the dry run refuses one that does not parse), the adaptive preset validated by SGLang's start-up check, adaptive
steps 0 priced as SGLang's worker runs it, SGLang's cap on an EAGLE server's running requests lifted where a band
needs more, the budget counting every GPU of a TP server, the projection applying only the TP difference, and
`--json` inside `--out`."""

from __future__ import annotations

import inspect
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import acceptance_world as W
import pytest

from sglang_eagle3_ext.cli.common import run_tool
from sglang_eagle3_ext.tune import costmodel, flags, projection, timings
from sglang_eagle3_ext.tune.outputs import write_adaptive, write_presets
from sglang_eagle3_ext.tune.servers import LAUNCHER, min_budget_min, server_args

FIXTURE = Path(__file__).with_name("tune_timings_kimi_width.json")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return W.eval_world(tmp_path_factory.mktemp("tune_sglang_world"), 12)


@pytest.fixture(scope="module")
def parser():
    p = flags.sglang_parser()
    if p is None:
        pytest.skip("needs SGLang")
    return p


def _tune(argv, capsys):
    from sglang_eagle3_ext.cli.tune import main

    rc = run_tool("tune", main, [str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _base(world):
    return [
        *("--target", world["target"], "--draft", world["draft"], "--data", world["export"]),
        *("--heldout-fraction", "1", "--device", "cpu"),
    ]


def _parse(parser, words):
    assert flags.parse_error(words, parser) is None, (words, flags.parse_error(words, parser))
    return parser.parse_args(words)


# ------------------------------------------------------------------------------------------- flags


@pytest.mark.sglang
@pytest.mark.parametrize("steps, backend", [(0, "fa3"), (1, "flashmla"), (3, "triton")])
def test_server_commands_use_no_flag_the_release_deprecates(parser, steps, backend):
    words = server_args("/m/target", backend, 32, "/m/draft", steps)
    ns = _parse(parser, words)
    for w in words:
        if w.startswith("--"):
            a = parser._option_string_actions[w]
            assert not type(a).__name__.startswith("Deprecated"), (w, type(a).__name__)
    graph = next(f for f in flags.GRAPH_MAX_BS_FIELDS if flags.flag_for(parser, f))
    assert getattr(ns, graph) == 32 and ns.decode_log_interval == 1 and ns.attention_backend == backend
    assert (ns.speculative_num_steps or 0) == steps


@pytest.mark.sglang
def test_dry_run_refuses_a_command_sglangs_parser_refuses(world, tmp_path, capsys):
    args = ["--dry-run", "--backends", "triton", "--out", tmp_path / "o"]
    rc, _, err = _tune([*_base(world), *args, "--server-args", "--no-such-flag 3"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--server-args" in err and "--no-such-flag" in err, err


@pytest.mark.sglang
def test_every_command_the_dry_run_prints_parses(world, tmp_path, parser, capsys):
    extra = "--mem-fraction-static 0.5"
    rc, out, err = _tune(
        [*_base(world), "--dry-run", "--backends", "triton", "--server-args", extra, "--json", "-"], capsys
    )
    assert rc == 0, err
    cmds = json.loads(out)["timing_pass"]["commands"]
    assert len(cmds) == 3
    for c in cmds:
        words = shlex.split(c)
        assert words[0] == LAUNCHER
        assert _parse(parser, words[1:]).mem_fraction_static == 0.5
        deprecated = [w for w in words if type(parser._option_string_actions.get(w)).__name__.startswith("Deprecated")]
        assert not deprecated, c


# ------------------------------------------------------------------------------------------- adaptive


def _model(draft_step_1: float) -> costmodel.BackendModel:
    """Verify grows with the tokens; the draft extend is dear; one draft step costs draft_step_1 at batch 1."""
    parts = {1: costmodel.Parts(1, 10.0, draft_step_1, 5.0), 64: costmodel.Parts(64, 12.0, 1.0, 5.0)}
    return costmodel.BackendModel("fa3", {1: 10.0, 64: 12.0}, parts)


def _outputs(tmp_path, world, model, accept):
    o = SimpleNamespace(concurrency=[1, 64], target=str(world["target"]), draft=str(world["draft"]), command="t")
    best = {
        c: {
            "backend": "fa3",
            "steps": s,
            "max_running": None,
            "tokens_per_s": model.tokens_per_s(c, s, accept),
            "speedup": 1.0,
            "source": "predicted",
        }
        for c, s in ((1, 0), (64, 2))
    }
    rep = {"best": best}
    rep["adaptive"] = write_adaptive(o, rep, {"fa3": model}, accept, tmp_path)
    rep["presets"] = write_presets(o, rep, tmp_path)
    return rep


@pytest.mark.sglang
@pytest.mark.parametrize(
    "draft_step_1, accept",
    [
        (20.0, {1: 1.9, 2: 2.0, 3: 2.05}),  # the smallest band best without drafting, the busy one at 1 step
        (1.0, {1: 1.0, 2: 1.0, 3: 1.0}),  # no band is faster speculating
        (1.0, {1: 1.9, 2: 2.6, 3: 3.0}),
    ],
)
def test_the_adaptive_preset_passes_sglangs_start_up_check(tmp_path, world, draft_step_1, accept):
    from sglang.srt.arg_groups.speculative_hook import _init_adaptive_speculative_params
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    from sglang_eagle3_ext.launch import presets

    rep = _outputs(tmp_path, world, _model(draft_step_1), accept)
    ad = rep["adaptive"]
    assert ad["written"] == any(ad["best_steps_by_band"].values()), ad
    if draft_step_1 == 20.0:
        assert ad["best_steps_by_band"][1] == 0 and ad["best_steps_by_band"][64] > 0, ad
    if not ad["written"]:
        assert not (tmp_path / "tuned.yaml").exists()
        return
    fields = presets.load(path=tmp_path / "tuned.yaml").server_args
    ns = SimpleNamespace(
        speculative_adaptive_config=fields["speculative_adaptive_config"],
        speculative_eagle_topk=fields.get("speculative_eagle_topk"),
        speculative_num_steps=fields.get("speculative_num_steps"),
        speculative_num_draft_tokens=fields.get("speculative_num_draft_tokens"),
    )
    _init_adaptive_speculative_params(ns)  # SGLang's own check: raises where it would refuse to start
    AdaptiveSpeculativeParams(ns.speculative_num_steps, fields["speculative_adaptive_config"])


@pytest.mark.sglang
def test_adaptive_steps_0_is_priced_with_the_draft_extend_sglang_still_runs(tmp_path, world):
    from sglang.srt.speculative import eagle_worker_v2

    src = inspect.getsource(eagle_worker_v2)
    # at steps 0 the worker verifies one token and still runs the draft extend unless told to skip it
    assert "speculative_num_steps == 0" in src and "_draft_extend_for_decode" in src
    m, accept = _model(1.0), {1: 1.3, 2: 1.5, 3: 1.6}
    extend = m.part(64).extend
    assert m.iteration_ms(64, 0, adaptive=True) == pytest.approx(m.iteration_ms(64, 0) + extend)
    ad = _outputs(tmp_path, world, m, accept)["adaptive"]
    by = ad["best_steps_by_band"]
    priced = {
        s: 64 * (accept.get(s, 1.0)) / (costmodel.interp(m.target_steps, 64 * (s + 1)) + s + extend)
        for s in (0, 1, 2, 3)
    }
    assert by[64] == max(priced, key=priced.get) > 0, (by, priced)
    assert ad["config"]["64"]["candidate_steps"] != [0]


# ------------------------------------------------------------------------------------------- running cap


@pytest.mark.sglang
def test_eagle_servers_run_every_request_of_a_band_above_sglangs_cap(parser, tmp_path, world):
    from sglang.srt.arg_groups import speculative_hook

    from sglang_eagle3_ext.launch import presets

    caps = set(
        re.findall(r"max_running_requests\s*=\s*(\d+)", inspect.getsource(speculative_hook._handle_eagle_family))
    )
    assert caps == {str(flags.EAGLE_DEFAULT_MAX_RUNNING)}, caps
    assert _parse(parser, server_args("/t", "fa3", 64, "/d", 3)).max_running_requests == 64
    assert _parse(parser, server_args("/t", "fa3", 32, "/d", 3)).max_running_requests is None
    assert _parse(parser, server_args("/t", "fa3", 64)).max_running_requests is None  # no EAGLE cap
    mine = server_args("/t", "fa3", 64, "/d", 3, extra=["--max-running-requests", "80"])
    assert mine.count("--max-running-requests") == 1 and _parse(parser, mine).max_running_requests == 80
    _outputs(tmp_path, world, _model(20.0), {1: 1.9, 2: 2.6, 3: 3.0})
    for name in ("tuned-c64.yaml", "tuned.yaml"):
        fields = presets.load(path=tmp_path / name).server_args
        assert _parse(parser, presets.to_cli_args(fields, parser)).max_running_requests == 64, name
    assert "max_running_requests" not in presets.load(path=tmp_path / "tuned-c1.yaml").server_args


@pytest.mark.sglang
def test_the_running_cap_decision_is_said_once_with_its_reason(world, tmp_path, capsys):
    argv = [*_base(world), "--timings", FIXTURE, "--no-measure", "--concurrency", "1,4,64", "--out", tmp_path / "o"]
    rc, _, err = _tune(argv, capsys)
    assert rc == 0, err
    said = [ln for ln in err.splitlines() if "--max-running-requests 64" in ln]
    assert len(said) == 1 and str(flags.EAGLE_DEFAULT_MAX_RUNNING) in said[0], err


# ------------------------------------------------------------------------------------------- budget, projection


@pytest.mark.sglang
def test_the_budget_counts_every_gpu_of_a_tp_server(world, tmp_path, capsys):
    tp8 = ["--server-args", "--tp-size 8", "--backends", "triton"]
    rc, _, err = _tune([*_base(world), "--dry-run", "--budget-min", "10", *tp8], capsys)
    assert rc == 2 and "--budget-min 10" in err and "8 GPUs" in err and len(err.strip().splitlines()) == 1, err
    rc, out, err = _tune([*_base(world), "--dry-run", "--budget-min", "100", *tp8, "--json", "-"], capsys)
    assert rc == 0, err
    bd = json.loads(out)["budget"]
    assert bd["gpus_per_server"] == 8 and bd["estimate_gpu_min_per_timing_pass"] == 8 * min_budget_min()
    argv = [*_base(world), "--timings", FIXTURE, "--no-measure", "--server-args", "--tp-size 2", "--json", "-"]
    rc, out, err = _tune([*argv, "--out", tmp_path / "o"], capsys)
    assert rc == 0, err
    assert json.loads(out)["budget"]["gpus_per_server"] == 2


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_projecting_to_the_measured_tp_and_depth_changes_nothing(tp):
    p = projection.project(6.0, 7.5, 0.8, 1.1, 3, 2.6, 61, 163840, 7168, to_layers=61, tp=tp, from_tp=tp)
    assert p["speedup"] == pytest.approx(p["measured_speedup_model"])
    assert p["target_step_ms"] == pytest.approx(6.0, abs=1e-4)


def test_projection_from_tp_1_divides_by_the_tp_and_adds_all_reduces():
    one = projection.project(6.0, 7.5, 0.8, 1.1, 3, 2.6, 10, 32000, 4096, to_layers=10, tp=8, from_tp=1)
    head = projection.lm_head_ms(32000, 4096)
    want = head / 8 + 10 * ((6.0 - head) / 10 / 8 + 2 * projection.ALLREDUCE_MS)
    assert one["target_step_ms"] == pytest.approx(want, abs=1e-4)


def test_timings_carry_the_tp_they_were_measured_at(tmp_path):
    from sglang_eagle3_ext.boundary import BadInput

    t = timings.read(FIXTURE)
    assert t["tp_size"] == 1  # a file without it was timed without TP
    p = timings.write(tmp_path / "t.json", {**t, "tp_size": 8})
    assert timings.read(p)["tp_size"] == 8
    bad = {**json.loads(p.read_text()), "tp_size": 0}
    with pytest.raises(BadInput, match="tp_size"):
        timings.parse(bad, "t.json")


# ------------------------------------------------------------------------------------------- --json inside --out


@pytest.mark.sglang
def test_a_report_inside_out_is_written_there(world, tmp_path, capsys):
    out = tmp_path / "fresh" / "o"
    rc, _, err = _tune([*_base(world), "--dry-run", "--out", out, "--json", out / "report.json"], capsys)
    assert rc == 0, err
    assert json.loads((out / "report.json").read_text())["dry_run"]
    (tmp_path / "file").write_text("x")
    rc, _, err = _tune(
        [*_base(world), "--dry-run", "--out", tmp_path / "file", "--json", tmp_path / "file" / "r.json"], capsys
    )
    assert rc == 2 and "--out" in err and len(err.strip().splitlines()) == 1, err
