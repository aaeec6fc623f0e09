"""`train` under torchrun on the CPU (gloo): two ranks train the tiny Llama draft (speculators' trainer, FSDP) and
the tiny MLA draft (DDP); each sample is trained on exactly once per epoch over the ranks; the draft equals a
one-process run with the same --global-batch; a run stopped after its first epoch and continued with --resume
equals a run that never stopped.

Tolerances: the float32 checkpoint in OUT/checkpoint/ within 1e-5 absolute of the one-process run (the ranks
sum gradients in another order: the one-process run accumulates them; measured 0 for the Llama draft and
~3e-7 for the MLA draft), and the bf16 draft within one bf16 rounding step of it (|a - b| <= 2^-7 max(|a|, |b|)).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("speculators.train.cli")
from safetensors.torch import load_file  # noqa: E402
from train_world import SMALL, train_args, write_samples  # noqa: E402

from sglang_eagle3_ext import envs  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError, TrainOptions, train_draft  # noqa: E402
from sglang_eagle3_ext.training.checkpoint import CKPT_DIR, STATE, TrainingStopped  # noqa: E402

N = 21  # 19 train (--train-ratio 0.95), 2 validate
N_TRAIN = 19
RUN = dict(epochs=2, global_batch=2, total_seq_len=128, num_workers=0, min_val_acc=0, log_every=100, device="cpu")
CKPT_MODEL = {"mla": f"{CKPT_DIR}/model_fp32.safetensors", "llama": f"{CKPT_DIR}/1/model.safetensors"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_dist")
    target = ensure_tiny_target(root / "target", **SMALL)
    write_samples(root / "data", N, lambda i: 20 + (i * 7) % 30, seed_each=True)  # ragged: the Llama route packs them
    return {"root": root, "target": target, "data": root / "data", "baseline": {}}


def _opts(world, out, arch, **kw) -> TrainOptions:
    return TrainOptions(data=world["data"], target=world["target"], out=out, draft_arch=arch, **{**RUN, **kw})


def one_process(world, arch) -> Path:
    """The uninterrupted one-process run every other run is compared with (made once per arch)."""
    if arch not in world["baseline"]:
        out = world["root"] / f"one_{arch}"
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as each torchrun rank runs (OMP_NUM_THREADS=1)
        try:
            train_draft(_opts(world, out, arch))
        finally:
            torch.set_num_threads(threads)
        world["baseline"][arch] = out
    return world["baseline"][arch]


def torchrun(world, out, arch, *extra, env=None) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "sglang_eagle3_ext",
        "train",
        *train_args(world["data"], world["target"], out),
        "--draft-arch",
        arch,
        "--device",
        "cpu",
        "--epochs",
        "2",
        "--global-batch",
        "2",
        "--total-seq-len",
        "128",
        "--num-workers",
        "0",
        "--min-val-acc",
        "0",
        "--log-every",
        "100",
        *extra,
    ]
    e = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=e, cwd=world["root"])


def assert_same_draft(a: Path, b: Path, arch: str) -> None:
    fa, fb = load_file(str(a / CKPT_MODEL[arch])), load_file(str(b / CKPT_MODEL[arch]))
    assert sorted(fa) == sorted(fb)
    worst = max(float((fa[k].float() - fb[k].float()).abs().max()) for k in fa)
    assert worst <= 1e-5, worst
    da, db = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert sorted(da) == sorted(db)
    for k in da:
        x, y = da[k].float(), db[k].float()
        step = torch.maximum(x.abs(), y.abs()) * 2.0**-7
        assert bool(((x - y).abs() <= step).all()), k


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_two_ranks_see_each_sample_once_per_epoch_and_train_the_one_process_draft(world, arch, tmp_path):
    record = tmp_path / "seen.jsonl"
    p = torchrun(world, tmp_path / "out", arch, env={envs.TRAIN_RECORD_SAMPLES: str(record)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("DONE steps=") == 1  # progress from rank 0 only
    assert "training on 2 processes (torchrun, gloo)" in p.stderr
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert sorted((x["rank"], x["epoch"]) for x in lines) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for epoch in (0, 1):
        ids = [i for x in lines if x["epoch"] == epoch for i in x["ids"]]
        assert sorted(ids) == list(range(N_TRAIN)), (epoch, sorted(ids))  # each exactly once, over both ranks
        assert all(x["ids"] for x in lines if x["epoch"] == epoch)
    orders = [[i for x in sorted(lines, key=lambda x: x["rank"]) if x["epoch"] == e for i in x["ids"]] for e in (0, 1)]
    assert orders[0] != orders[1]  # a new permutation each epoch
    assert_same_draft(tmp_path / "out", one_process(world, arch), arch)


def _stopped(world, out, arch, monkeypatch) -> None:
    monkeypatch.setenv(envs.TRAIN_STOP_AFTER_EPOCHS, "1")
    with pytest.raises(TrainingStopped, match="--resume"):
        train_draft(_opts(world, out, arch))
    monkeypatch.delenv(envs.TRAIN_STOP_AFTER_EPOCHS)
    state = json.loads((out / CKPT_DIR / STATE).read_text())
    assert state["epochs_done"] == 1 and (out / "model.safetensors").exists()


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_resume_after_the_first_epoch_trains_the_uninterrupted_draft(world, arch, tmp_path, monkeypatch):
    out = tmp_path / "out"
    _stopped(world, out, arch, monkeypatch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = train_draft(_opts(world, out, arch, resume=True))
    finally:
        torch.set_num_threads(threads)
    assert json.loads((out / CKPT_DIR / STATE).read_text())["epochs_done"] == 2
    assert r["steps"] == len(r["history"]) and r["history"][0]["step"] == 1  # the first epoch's steps kept
    assert_same_draft(out, one_process(world, arch), arch)


def test_resume_under_torchrun(world, tmp_path):
    """Stopped and resumed on two ranks: every rank loads the checkpoint rank 0 wrote."""
    out = tmp_path / "out"
    p = torchrun(world, out, "mla", env={envs.TRAIN_STOP_AFTER_EPOCHS: "1"})
    # torchrun exits 1 when a rank fails; the ranks' own exit code (2) is in its report
    assert p.returncode == 1 and p.stderr.count("train: error: stopped after epoch 1 of 2") == 1, p.stderr[-2000:]
    assert "exitcode  : 2" in p.stderr
    p = torchrun(world, out, "mla", "--resume")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "--resume: continuing after epoch 1" in p.stdout
    assert_same_draft(out, one_process(world, "mla"), "mla")


def test_resume_refuses_settings_that_change_the_run(world, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(one_process(world, "mla"), out)
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(TrainDraftError, match="--global-batch is 4 but the checkpoint was trained with 2"):
        train_draft(_opts(world, out, "mla", global_batch=4, resume=True))
    with pytest.raises(TrainDraftError, match="--seed"):
        train_draft(_opts(world, out, "mla", seed=3, resume=True))
    assert sorted(p.name for p in out.rglob("*")) == before


def test_resume_with_nothing_to_resume_starts_afresh(world, tmp_path, capsys):
    r = train_draft(_opts(world, tmp_path / "new", "mla", resume=True, epochs=1))
    assert r["steps"] == 10 and "nothing in" in capsys.readouterr().out


def test_global_batch_must_split_over_the_ranks():
    from sglang_eagle3_ext.training.sharding import accumulation

    assert accumulation(None, 4) == (4, 1) and accumulation(8, 4) == (8, 2)
    with pytest.raises(TrainDraftError, match="multiple of the 4 ranks"):
        accumulation(6, 4)


_scalar = st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=6)
_json = st.recursive(
    _scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8
)
_state = st.fixed_dictionaries(
    {},
    optional={
        "version": _json | st.just(1),
        "epochs_done": _json | st.just(1),
        "global_step": _json | st.just(3),
        "identity": _json | st.just({}),
        "files": _json | st.just(["state.json"]) | st.just(["../x"]),
    },
)


@settings(max_examples=150, deadline=None)
@given(state=_state | _json, raw=st.none() | st.binary(max_size=40))
def test_any_checkpoint_state_resumes_or_is_refused_by_name(tmp_path_factory, state, raw):
    """--resume reads OUT/checkpoint/state.json, written by an earlier run or by anyone: it resumes from it or
    refuses it with a TrainDraftError naming the file and the fix, nothing else."""
    from sglang_eagle3_ext import outdir
    from sglang_eagle3_ext.training.checkpoint import read_resume_point

    out = tmp_path_factory.mktemp("resume") / "out"
    with outdir.writing(out, tool="train", flag="--out") as tmp:
        (tmp / CKPT_DIR).mkdir()
        (tmp / CKPT_DIR / STATE).write_bytes(raw if raw is not None else json.dumps(state).encode())
    try:
        got = read_resume_point(out, True)
    except TrainDraftError as e:
        assert "--resume" in str(e) and "\n" not in str(e), e
        return
    assert isinstance(got["epochs_done"], int) and got["epochs_done"] >= 1 and isinstance(got["identity"], dict)
    assert all((out / CKPT_DIR / f).is_file() for f in got["files"])
