"""`train --select-by predicted-accept`: --out keeps the draft of the epoch that scores best (the accept length
`eval` predicts on the split train holds out), not the last; checkpoint/ stays the last epoch's; a resumed run
keeps comparing against the best score so far; the run's summary lists every epoch's score and the kept epoch;
the flags' bad values are refused. Hidden states of the real transformers DeepSeek-V3 (test_train_draft.py)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV3ForCausalLM"):
    pytest.skip("transformers has no DeepseekV3ForCausalLM", allow_module_level=True)

from helpers import assert_names_its_input  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from test_train_draft import _run_target, world  # noqa: E402,F401 - the shared module fixture
from train_world import AUX, SMALL, cpu_run, train_args  # noqa: E402

from sglang_eagle3_ext import envs  # noqa: E402
from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import PREDICTABLE, ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError, TrainOptions, train_draft  # noqa: E402
from sglang_eagle3_ext.training.checkpoint import CKPT_DIR, STATE, TrainingStopped  # noqa: E402

RUN = dict(device="cpu", total_seq_len=512, num_workers=0, log_every=100, min_val_acc=0, lr=3e-3)
FLAGS = [*cpu_run(100), "--lr", "3e-3"]


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """Samples whose tokens are the target's own greedy continuations (as a dump records them) on the predictable
    target, so that a draft that learns is accepted more and the epochs score apart."""
    root = tmp_path_factory.mktemp("train_select")
    target = ensure_tiny_target(root / "target", **SMALL, **PREDICTABLE)
    model = transformers.DeepseekV3ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    ids = torch.randint(0, SMALL["vocab_size"], (40, 4), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for _ in range(44):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    out, prenorm = _run_target(model, ids)
    data = root / "data"
    (data / "hidden_states").mkdir(parents=True)
    for i in range(ids.shape[0]):
        L = 36 + i % 13
        hs = torch.stack([out.hidden_states[k][i, :L] for k in AUX] + [prenorm[i, :L]], 1)
        save_file(
            {"token_ids": ids[i, :L].contiguous(), "hidden_states": hs.to(torch.bfloat16).contiguous()},
            str(data / "hidden_states" / f"hs_{i}.safetensors"),
        )
    (data / "metadata.json").write_text(json.dumps({"hf_hidden_state_indices": AUX}))
    return {"root": root, "target": target, "data": data}


def _draft(folder) -> dict:
    return load_file(str(folder / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    return sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


class TableScorer:
    """Scores the epochs in the order it is called from a fixed table, and keeps the tensors of every draft it
    was given (what the epoch wrote)."""

    def __init__(self, scores, criterion=None):
        self.scores, self.seen = list(scores), []
        self.criterion = criterion or {"kind": "table"}

    def __call__(self, draft):
        assert sorted(p.name for p in draft.iterdir() if p.is_dir()) == []  # the draft alone, no run files
        self.seen.append(_draft(draft))
        return self.scores[len(self.seen) - 1], {"call": len(self.seen)}


class Recording:
    """The train command's own scorer, keeping the tensors of each draft it scores."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []
        self.criterion, self.name = inner.criterion, inner.name

    def __call__(self, draft):
        self.seen.append(_draft(draft))
        return self.inner(draft)


@pytest.fixture(scope="module")
def few(world, tmp_path_factory):
    """The world with 12 of its samples: which epoch is kept needs epochs that differ, not a draft that learns."""
    data = tmp_path_factory.mktemp("train_select_few")
    (data / "hidden_states").mkdir()
    shutil.copy(world["data"] / "metadata.json", data / "metadata.json")
    for i in range(12):
        shutil.copy(world["data"] / "hidden_states" / f"hs_{i}.safetensors", data / "hidden_states")
    return {**world, "data": data}


def _opts(world, out, arch, **kw) -> TrainOptions:
    return TrainOptions(data=world["data"], target=world["target"], out=out, draft_arch=arch, **{**RUN, **kw})


def _state(out) -> dict:
    return json.loads((out / CKPT_DIR / STATE).read_text())


# ------------------------------------------------------------------------------ the kept epoch


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_out_keeps_the_best_scored_epoch_and_the_last_checkpoint(few, arch, tmp_path):
    world = few
    scorer = TableScorer([1.5, 3.0, 2.0])
    r = train_draft(_opts(world, tmp_path / "best", arch, epochs=3, select_by="predicted-accept", epoch_scorer=scorer))
    seen = scorer.seen
    assert len(seen) == 3 and not _same(seen[1], seen[2]) and not _same(seen[0], seen[1])  # the epochs differ
    assert _same(_draft(tmp_path / "best"), seen[1])  # epoch 2's draft, not the last one's
    sel = r["selection"]
    assert sel["select_by"] == "predicted-accept" and (sel["kept_epoch"], sel["kept_score"]) == (2, 3.0)
    assert [(s["epoch"], s["score"]) for s in sel["scores"]] == [(1, 1.5), (2, 3.0), (3, 2.0)]
    state = _state(tmp_path / "best")
    assert state["epochs_done"] == 3 and state["selection"]["kept_epoch"] == 2  # checkpoint/: the last epoch

    last = TableScorer([1.5, 3.0, 2.0])
    r = train_draft(_opts(world, tmp_path / "last", arch, epochs=3, epoch_scorer=last))
    assert _same(_draft(tmp_path / "last"), last.seen[2]) and _same(last.seen[1], seen[1])  # same run, last kept
    assert r["selection"]["kept_epoch"] == 3 and [s["score"] for s in r["selection"]["scores"]] == [1.5, 3.0, 2.0]


def test_select_by_last_without_a_scorer_keeps_the_last_epoch(few, tmp_path):
    r = train_draft(_opts(few, tmp_path / "out", "mla", epochs=2))
    assert r["selection"] == {"select_by": "last", "kept_epoch": 2, "kept_score": None, "scores": []}


def _evaluate(draft, world, steps=3) -> float:
    from sglang_eagle3_ext.acceptance.evaluate import EvalOptions, evaluate

    return evaluate(
        EvalOptions(
            draft=str(draft), data=str(world["data"]), target=str(world["target"]), steps=steps, heldout_fraction=0.05
        )
    )["predicted_accept_length"]


def test_predicted_accept_keeps_the_llama_epoch_eval_predicts_best(walk, tmp_path):
    """The train command's scorer end to end: each epoch's speculators draft converted and evaluated on the
    held-out rows; --out holds the epoch with the highest figure, the one `eval` gives for it."""
    from sglang_eagle3_ext.draft.convert import convert

    out = tmp_path / "out"
    args = train_cli.build_parser().parse_args(
        [
            *train_args(walk["data"], walk["target"], out),
            "--epochs",
            "2",
            *FLAGS,
            "--select-by",
            "predicted-accept",
            "--select-steps",
            "3",
        ]
    )
    opts = train_cli.options_from_args(args)
    opts.epoch_scorer = rec = Recording(opts.epoch_scorer)
    sel = train_draft(opts)["selection"]
    scores = [s["score"] for s in sel["scores"]]
    assert [s["epoch"] for s in sel["scores"]] == [1, 2] and all(s >= 1.0 for s in scores), sel
    assert all(s["samples"] == 2 and s["steps"] == 3 for s in sel["scores"])  # rows 38, 39 of 40
    assert scores[0] != scores[1]  # the epochs score apart: the choice below can be wrong
    best = scores.index(max(scores))
    assert sel["kept_epoch"] == best + 1 and sel["kept_score"] == max(scores)
    assert _same(_draft(out), rec.seen[best])
    quiet = dict(progress=False, log=lambda *a, **k: None)
    assert _evaluate(convert(out, tmp_path / "kept", **quiet), walk) == max(scores)
    other = tmp_path / "other"  # the epoch not kept, as eval scores it on its own
    other.mkdir()
    shutil.copy2(out / "config.json", other / "config.json")
    save_file(rec.seen[1 - best], str(other / "model.safetensors"), metadata={"format": "pt"})
    assert _evaluate(convert(other, tmp_path / "other_sglang", **quiet), walk) == scores[1 - best]


def test_predicted_accept_through_the_command_mla(walk, tmp_path):
    """`train --draft-arch mla --select-by predicted-accept --json`: the draft in --out (SGLang's layout) is the
    one whose figure is the best of the summary's per-epoch scores."""
    out, js = tmp_path / "out", tmp_path / "run.json"
    rc = run_tool(
        "train",
        train_cli.main,
        [
            *train_args(walk["data"], walk["target"], out),
            "--draft-arch",
            "mla",
            "--epochs",
            "2",
            *FLAGS,
            "--select-by",
            "predicted-accept",
            "--select-samples",
            "1",
            "--json",
            str(js),
        ],
    )
    assert rc == 0
    sel = json.loads(js.read_text())["selection"]
    scores = [s["score"] for s in sel["scores"]]
    assert [s["epoch"] for s in sel["scores"]] == [1, 2] and all(s["samples"] == 1 for s in sel["scores"])
    assert scores[0] != scores[1] and sel["kept_score"] == max(scores)
    assert sel["kept_epoch"] == scores.index(max(scores)) + 1
    from sglang_eagle3_ext.acceptance.evaluate import EvalOptions, evaluate

    rep = evaluate(EvalOptions(draft=str(out), data=str(walk["data"]), target=str(walk["target"]), samples=1))
    assert rep["predicted_accept_length"] == max(scores)


# ------------------------------------------------------------------------------ --resume


def _stop_after_one(world, out, arch, scorer, monkeypatch) -> None:
    monkeypatch.setenv(envs.TRAIN_STOP_AFTER_EPOCHS, "1")
    with pytest.raises(TrainingStopped):
        train_draft(_opts(world, out, arch, epochs=3, select_by="predicted-accept", epoch_scorer=scorer))
    monkeypatch.delenv(envs.TRAIN_STOP_AFTER_EPOCHS)


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_resume_keeps_the_best_score_so_far(world, arch, tmp_path, monkeypatch):
    """Epoch 1 scores 5 and the run stops; the resumed run scores epochs 2 and 3 lower: --out keeps epoch 1
    (a resumed run that forgot the best score would keep epoch 3)."""
    out = tmp_path / "out"
    first = TableScorer([5.0])
    _stop_after_one(world, out, arch, first, monkeypatch)
    assert _state(out)["selection"]["kept_score"] == 5.0
    rest = TableScorer([1.0, 2.0])
    r = train_draft(_opts(world, out, arch, epochs=3, resume=True, select_by="predicted-accept", epoch_scorer=rest))
    assert len(rest.seen) == 2 and not _same(rest.seen[1], first.seen[0])
    assert _same(_draft(out), first.seen[0])
    sel = r["selection"]
    assert [(s["epoch"], s["score"]) for s in sel["scores"]] == [(1, 5.0), (2, 1.0), (3, 2.0)]
    assert (sel["kept_epoch"], sel["kept_score"]) == (1, 5.0) and _state(out)["epochs_done"] == 3


def test_resume_with_other_scoring_settings_scores_the_kept_draft_again(world, tmp_path, monkeypatch):
    """Scores of other settings (eval's steps, samples) do not compare: the draft --out holds is scored again."""
    out = tmp_path / "out"
    first = TableScorer([5.0])
    _stop_after_one(world, out, "mla", first, monkeypatch)
    other = TableScorer([1.5, 1.0, 2.0], criterion={"kind": "table", "steps": 5})
    r = train_draft(_opts(world, out, "mla", epochs=3, resume=True, select_by="predicted-accept", epoch_scorer=other))
    assert _same(other.seen[0], first.seen[0])  # the kept draft first, scored by the new settings
    assert _same(_draft(out), other.seen[2])  # 2.0 beats its 1.5
    sel = r["selection"]
    assert [(s["epoch"], s["score"]) for s in sel["scores"]] == [(1, 1.5), (2, 1.0), (3, 2.0)]
    assert sel["kept_epoch"] == 3


class Failing(TableScorer):
    """Scores the first epoch, then cannot (as eval refusing the draft would)."""

    def __call__(self, draft):
        if self.seen:
            raise TrainDraftError("--data: the samples cannot be read")
        return super().__call__(draft)


def test_an_epoch_that_cannot_be_scored_is_not_saved(world, tmp_path):
    out = tmp_path / "out"
    scorer = Failing([2.0])
    with pytest.raises(
        TrainDraftError,
        match="^--select-by predicted-accept: epoch 2's draft could not be scored: "
        "--data: the samples cannot be read; .*--resume",
    ):
        train_draft(_opts(world, out, "mla", epochs=3, select_by="predicted-accept", epoch_scorer=scorer))
    assert _state(out)["epochs_done"] == 1 and _same(_draft(out), scorer.seen[0])
    assert _state(out)["selection"]["scores"] == [{"call": 1, "epoch": 1, "score": 2.0}]


# ------------------------------------------------------------------------------ refusals


def _cli(world, out, *extra):
    return run_tool(
        "train",
        train_cli.main,
        ["--data", str(world["data"]), "--target", str(world["target"]), "--out", str(out), *FLAGS, *extra],
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--select-by", "best"], "--select-by"),
        (["--select-by", "predicted-accept", "--select-steps", "0"], "--select-steps"),
        (["--select-by", "predicted-accept", "--select-samples", "x"], "--select-samples"),
        (["--select-steps", "4"], "--select-steps applies to --select-by predicted-accept"),
        (["--select-samples", "4"], "--select-samples applies to --select-by predicted-accept"),
        (["--select-by", "predicted-accept", "--train-ratio", "1"], "--train-ratio"),
    ],
)
def test_bad_selection_flags_are_refused(world, tmp_path, capsys, extra, words):
    assert _cli(world, tmp_path / "out", *extra) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(select_by="best"), "--select-by 'best': expected one of last, predicted-accept"),
        (dict(select_by="predicted-accept"), "--select-by predicted-accept: no epoch_scorer"),
        (dict(select_by="last", epoch_scorer="eval"), "epoch_scorer"),
    ],
)
def test_a_python_caller_gets_the_same_refusals(world, tmp_path, kw, words):
    with pytest.raises(TrainDraftError, match="^--select-by") as e:
        train_draft(_opts(world, tmp_path / "out", "mla", **kw))
    assert words in str(e.value)
    assert not (tmp_path / "out").exists()


_flag_values = st.sampled_from(["1", "3", "0", "-2", "2.5", "", "x", "10000000000000000000000"]) | st.text(max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    select_by=st.none() | st.sampled_from(["last", "predicted-accept"]) | st.text(max_size=8),
    steps=st.none() | _flag_values,
    samples=st.none() | _flag_values,
    ratio=st.none() | st.sampled_from(["1", "0.5", "0", "nan"]),
)
def test_any_selection_flags_plan_or_are_refused(world, capsys, select_by, steps, samples, ratio):
    """The selection flags with --dry-run: the plan (exit 0) or a one-line refusal (exit 2), never a bug."""
    argv = ["--target", str(world["target"]), "--dry-run", "--device", "cpu", "--json", "-", "--quiet"]
    for flag, v in (
        ("--select-by", select_by),
        ("--select-steps", steps),
        ("--select-samples", samples),
        ("--train-ratio", ratio),
    ):
        argv += [] if v is None else [f"{flag}={v}"]
    capsys.readouterr()
    rc = run_tool("train", train_cli.main, argv)
    assert rc in (0, 2)
    if rc == 2:
        assert_names_its_input(
            capsys.readouterr().err, "--select-by", "--select-steps", "--select-samples", "--train-ratio"
        )


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5) | st.floats() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=12,
)
_records = st.fixed_dictionaries(
    {},
    optional={
        "select_by": st.sampled_from(["last", "predicted-accept", "best"]) | _json,
        "criterion": st.none() | st.just({"kind": "table"}) | _json,
        "kept_epoch": st.none() | st.integers(-1, 4) | _json,
        "kept_score": st.none() | st.floats() | _json,
        "scores": st.lists(
            st.fixed_dictionaries(
                {"epoch": st.integers(0, 4) | _json}, optional={"score": st.none() | st.floats() | _json}
            ),
            max_size=3,
        )
        | _json,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=_records | _json)
def test_any_recorded_selection_resumes_or_is_refused_by_name(record):
    """checkpoint/state.json's selection entry, written by an earlier run or by anyone: read, or refused naming
    --resume and the fix."""
    from sglang_eagle3_ext.training import selection

    state = {"epochs_done": 3, "selection": record}
    try:
        keeper = selection.Keeper.for_run(
            TrainOptions(data="d", target="t", out="o", select_by="predicted-accept", epoch_scorer=TableScorer([])),
            state,
        )
    except TrainDraftError as e:
        assert str(e).startswith("--resume: ") and "--force" in str(e) and "\n" not in str(e), e
        return
    s = keeper.summary()
    assert s["kept_epoch"] is None or 1 <= s["kept_epoch"] <= 3
    assert all(1 <= x["epoch"] <= 3 for x in s["scores"])
    json.dumps(s)


def test_mla_heldout_split_of_eval_is_trains():
    """eval (and so the scorer) evaluates exactly the files `train --draft-arch mla` validates on."""
    from sglang_eagle3_ext.acceptance.data import heldout
    from sglang_eagle3_ext.draft.arch import mla
    from sglang_eagle3_ext.training.mla.train import _split

    for ratio in (0.5, 0.8, 0.9, 0.95, 0.99):
        for n in range(2, 400, 7):
            _, val = _split(TrainOptions(data="d", target="t", out="o", train_ratio=ratio), [100] * n)
            assert heldout(n, 1 - ratio, mla)[0] == val, (ratio, n)
