"""`train --resume` refuses a checkpoint in --out that does not fit the run, before it loads or trains anything:
saved with other shapes, corrupt (an optimizer or scheduler state that is no pickle, a truncated model file, a
state.json of the wrong form), or foreign (another run's optimizer or schedule, a draft where the checkpoint
belongs, another layout). Each refusal is one line naming the file (or the flag) and what differs, exit 2, and
--out is byte for byte what it was. One trained checkpoint per layout; each case works on a copy of it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("speculators.train.cli")
from helpers import assert_names_its_input  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from train_world import SMALL, train_args, write_samples  # noqa: E402

from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainOptions, train_draft  # noqa: E402
from sglang_eagle3_ext.training.checkpoint import CKPT_DIR, STATE  # noqa: E402

FLAGS = ["--device", "cpu", "--ttt-steps", "1", "--total-seq-len", "128", "--num-workers", "0", "--min-val-acc", "0"]
TRAINED_WITH = ["--intermediate-size", "96"]  # the checkpoints' own setting (the target's default is 128)
# the files of each layout's checkpoint (relative to --out)
MODEL = {"mla": f"{CKPT_DIR}/model_fp32.safetensors", "llama": f"{CKPT_DIR}/0/model.safetensors"}
OPTIMIZER = {"mla": f"{CKPT_DIR}/optimizer.pt", "llama": f"{CKPT_DIR}/0/optimizer_state_dict.pt"}
SCHEDULER = {"mla": f"{CKPT_DIR}/scheduler.pt", "llama": f"{CKPT_DIR}/0/scheduler_state_dict.pt"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_refusals")
    target = ensure_tiny_target(root / "target", **SMALL)
    data = write_samples(root / "data", 6, lambda i: 20 + (i * 7) % 30, seed_each=True)
    w = {"root": root, "target": target, "data": data}
    for arch in ("mla", "llama"):  # one epoch each: what every case below resumes (a copy of)
        train_draft(
            TrainOptions(
                data=data,
                target=target,
                out=root / arch,
                draft_arch=arch,
                epochs=1,
                intermediate_size=96,
                ttt_steps=1,
                total_seq_len=128,
                num_workers=0,
                min_val_acc=0,
                device="cpu",
                log_every=100,
            )
        )
        w[arch] = root / arch
    return w


def digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def copy_of(world, arch: str, tmp_path: Path) -> Path:
    out = tmp_path / f"out_{arch}"
    shutil.copytree(world[arch], out)
    return out


def resume(world, out: Path, arch: str, *extra: str) -> int:
    return train_cli.main(
        [
            *train_args(world["data"], world["target"], out),
            "--draft-arch",
            arch,
            *FLAGS,
            "--epochs",
            "2",
            "--resume",
            *extra,
        ]
    )


def assert_refused(world, capsys, out: Path, arch: str, *extra: str, names=()) -> str:
    """Resumed: exit 2 in one line naming one of `names` (files relative to --out, or flags), --out untouched."""
    before = digest(out)
    rc = resume(world, out, arch, *extra)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert rc == 2 and len(lines) == 1, err[-3000:]
    assert "Traceback" not in err and "a bug" not in err, err[-3000:]
    assert_names_its_input(lines[0], *[out / n if "/" in n or "." in n else n for n in names])
    assert digest(out) == before  # nothing in --out changed
    return lines[0]


# ---- other shapes ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_a_flag_left_out_that_changes_the_shapes_is_named(world, capsys, tmp_path, arch):
    out = copy_of(world, arch, tmp_path)
    line = assert_refused(world, capsys, out, arch, names=(f"{CKPT_DIR}/{STATE}",))
    assert "--intermediate-size is 128 but the checkpoint was trained with 96" in line, line


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_a_checkpoint_recording_no_shape_is_compared_by_its_header(world, capsys, tmp_path, arch):
    """A state.json from before the shape was recorded: the model file's header tells the shapes."""
    out = copy_of(world, arch, tmp_path)
    state = json.loads((out / CKPT_DIR / STATE).read_text())
    for k in ("intermediate_size", "num_layers", "head_dim", "draft_vocab_size", "ttt_steps"):
        state["identity"].pop(k, None)
    (out / CKPT_DIR / STATE).write_text(json.dumps(state))
    line = assert_refused(world, capsys, out, arch, names=(MODEL[arch],))
    assert "layers.0.mlp.gate_proj.weight is [96, 64], this run's is [128, 64]" in line, line
    assert "trained with --intermediate-size 96" in line, line


# ---- corrupt files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["mla", "llama"])
@pytest.mark.parametrize("which", ["optimizer", "scheduler"])
def test_a_state_that_is_not_a_pickle_is_named_corrupt(world, capsys, tmp_path, arch, which):
    out = copy_of(world, arch, tmp_path)
    rel = (OPTIMIZER if which == "optimizer" else SCHEDULER)[arch]
    (out / rel).write_bytes(b"not a pickle")
    line = assert_refused(world, capsys, out, arch, *TRAINED_WITH, names=(rel,))
    assert "corrupt" in line, line


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_a_truncated_model_file_is_named_corrupt(world, capsys, tmp_path, arch):
    out = copy_of(world, arch, tmp_path)
    p = out / MODEL[arch]
    p.write_bytes(p.read_bytes()[:-100])  # the header intact, the data short
    line = assert_refused(world, capsys, out, arch, *TRAINED_WITH, names=(MODEL[arch],))
    assert "corrupt" in line, line


@pytest.mark.parametrize(
    "change",
    [
        {"history": [1]},
        {"history": [{"step": 1}]},
        {"history": [{"step": 1, "epoch": 0, "loss": "x", "accs": [0.0], "tokens": 1, "time_s": 1, "fetch_s": 0}]},
        {"global_step": 4},
    ],
    ids=["row-not-an-object", "row-lacks-the-loss", "a-loss-that-is-text", "another-step"],
)
def test_a_state_json_of_the_wrong_form_is_named(world, capsys, tmp_path, change):
    out = copy_of(world, "mla", tmp_path)
    state = json.loads((out / CKPT_DIR / STATE).read_text())
    (out / CKPT_DIR / STATE).write_text(json.dumps({**state, **change}))
    assert_refused(world, capsys, out, "mla", *TRAINED_WITH, names=(f"{CKPT_DIR}/{STATE}", OPTIMIZER["mla"]))


# ---- foreign files ---------------------------------------------------------------------------------------------
def _save_changed(path: Path, change) -> None:
    sd = torch.load(path, weights_only=True)
    change(sd)
    torch.save(sd, path)


def _other_shape(osd: dict) -> None:
    st = next(iter(osd["state"].values()))
    st["exp_avg"] = torch.zeros(7, 3)
    st["exp_avg_sq"] = torch.zeros(7, 3)


def _other_schedule(s) -> None:
    s["last_epoch"] += 3


@pytest.mark.parametrize("arch", ["mla", "llama"])
@pytest.mark.parametrize("which", ["optimizer", "scheduler"])
def test_another_runs_optimizer_or_schedule_is_named(world, capsys, tmp_path, arch, which):
    out = copy_of(world, arch, tmp_path)
    rel = (OPTIMIZER if which == "optimizer" else SCHEDULER)[arch]
    _save_changed(out / rel, _other_shape if which == "optimizer" else _other_schedule)
    assert_refused(world, capsys, out, arch, *TRAINED_WITH, names=(rel,))


def test_a_draft_where_the_checkpoint_belongs_is_named(world, capsys, tmp_path):
    """The served draft (bf16, with the target's embedding and head) copied over the checkpoint's model file."""
    out = copy_of(world, "llama", tmp_path)
    shutil.copy(out / "model.safetensors", out / MODEL["llama"])
    line = assert_refused(world, capsys, out, "llama", *TRAINED_WITH, names=(MODEL["llama"],))
    assert "embed_tokens.weight" in line, line


@pytest.mark.parametrize("arch,other", [("mla", "llama"), ("llama", "mla")])
def test_a_run_resumed_as_another_layout_is_named(world, capsys, tmp_path, arch, other):
    out = copy_of(world, arch, tmp_path)
    line = assert_refused(world, capsys, out, other, *TRAINED_WITH, names=(f"{CKPT_DIR}/{STATE}",))
    assert f"--draft-arch is '{other}'" in line, line


# ---- properties over the readers -------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_truncation_of_a_model_file_is_refused_as_corrupt(world, tmp_path, data):
    from sglang_eagle3_ext.training import TrainDraftError
    from sglang_eagle3_ext.training.resume import check_model_file

    src = world["mla"] / MODEL["mla"]
    raw = src.read_bytes()
    n = data.draw(st.integers(0, len(raw) - 1))
    p = tmp_path / "model.safetensors"
    p.write_bytes(raw[:n])
    expected = {k: tuple(v.shape) for k, v in load_file(str(src)).items()}  # the file's own: only its bytes are wrong
    with pytest.raises(TrainDraftError, match="corrupt") as e:
        check_model_file(p, expected)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)


def _step(node, key):
    """The child of a JSON object or list that `key` picks (an index wraps around; a list takes a name as 0)."""
    if isinstance(node, list):
        return (key % len(node) if isinstance(key, int) else 0) if node else None
    if isinstance(node, dict):
        return key if key in node else next(iter(node), None)
    return None


def _mutate(doc, path: list, value, delete: bool):
    """`doc` with the value at `path` (keys or indices, as far as they reach) replaced by `value` or deleted."""
    node = doc
    for key in path[:-1]:
        k = _step(node, key)
        if k is None or not isinstance(node[k], (dict, list)):
            break
        node = node[k]
    k = _step(node, path[-1])
    if k is None:
        return doc
    if delete and isinstance(node, dict):
        del node[k]
    else:
        node[k] = value
    return doc


_TOP = ["history", "history", "history", "identity", "selection", "files", "epochs_done", "global_step", "version"]
_INNER = ["loss", "accs", "step", "epoch", "tokens", "time_s", "seed", "n_train", "layer_ids", "kept_epoch", "scores"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.tuples(st.sampled_from(_TOP), st.integers(0, 3), st.sampled_from(_INNER)).map(list),
    depth=st.sampled_from([1, 2, 3, 3]),
    value=_json,
    delete=st.booleans(),
)
def test_any_corruption_of_state_json_resumes_or_is_refused_by_name(
    world, capsys, tmp_path_factory, path, depth, value, delete
):
    """A state.json with one value replaced or deleted, resumed for as many epochs as it records: the run continues
    (nothing left to train), or is refused in one line naming the checkpoint's file or the flag, --out untouched."""
    out = tmp_path_factory.mktemp("state") / "out"
    shutil.copytree(world["mla"], out)
    p = out / CKPT_DIR / STATE
    p.write_text(json.dumps(_mutate(json.loads(p.read_text()), path[:depth], value, delete)))
    before = digest(out)
    rc = train_cli.main(
        [
            *train_args(world["data"], world["target"], out),
            "--draft-arch",
            "mla",
            *FLAGS,
            *TRAINED_WITH,
            "--epochs",
            "1",
            "--resume",
        ]
    )
    err = capsys.readouterr().err
    assert rc in (0, 2), err[-3000:]
    if rc == 2:
        lines = [x for x in err.splitlines() if "error:" in x]
        assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
        assert_names_its_input(lines[0], p, out / CKPT_DIR, "--")
        assert digest(out) == before
