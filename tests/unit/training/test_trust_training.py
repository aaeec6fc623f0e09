"""Draft training trusts no sample file: every hs_{i}.safetensors loaded for training is checked (tensors
present, integer token ids inside the target's vocab, states finite and shaped [L, K+1, H] as the target and
the layer ids say) and a bad one is refused by name; a draft whose weights are not finite is never saved;
an accuracy over no tokens never reads as a perfect one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from train_world import AUX, SMALL, train_args, write_samples  # noqa: E402

from sglang_eagle3_ext.cli import train as train_command  # noqa: E402
from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError  # noqa: E402

H, V = SMALL["hidden_size"], SMALL["vocab_size"]


def make_data(root: Path, n: int = 6, bad: int | None = None, **tensors) -> Path:
    """n good samples; `bad=i, **tensors` replaces tensors of sample i."""
    return write_samples(root / "data", n, lambda i: 24 + i, seed_each=True, replace={bad: tensors})


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return ensure_tiny_target(tmp_path_factory.mktemp("trust_target") / "target", **SMALL)


def train_cli(target, data, out, *extra, arch="mla"):
    return run_tool(
        "train",
        train_command.main,
        [
            *train_args(data, target, out),
            "--device",
            "cpu",
            "--draft-arch",
            arch,
            "--num-workers",
            "0",
            "--total-seq-len",
            "256",
            "--min-val-acc",
            "0",
            "--steps",
            "2",
            *extra,
        ],
    )


BAD_SAMPLES = {
    "nan_state": dict(hidden_states=torch.full((26, 4, H), float("nan")).bfloat16()),
    "inf_state": dict(hidden_states=torch.full((26, 4, H), float("inf"))),
    "width": dict(hidden_states=torch.randn(26, 4, H + 8)),
    "slots": dict(hidden_states=torch.randn(26, 3, H)),
    "rows": dict(hidden_states=torch.randn(20, 4, H)),
    "id_past_vocab": dict(token_ids=torch.full((26,), V, dtype=torch.long)),
    "multimodal_pad": dict(token_ids=torch.full((26,), 1_000_000 + 77, dtype=torch.long)),
    "negative_id": dict(token_ids=torch.full((26,), -1, dtype=torch.long)),
    "float_ids": dict(token_ids=torch.rand(26) * 10),
    "ids_2d": dict(token_ids=torch.zeros(26, 1, dtype=torch.long)),
    "int_states": dict(hidden_states=torch.zeros(26, 4, H, dtype=torch.int32)),
    "no_states": dict(hidden_states=None),
    "no_ids": dict(token_ids=None),
}


@pytest.mark.parametrize("arch", ["mla", "llama"])
@pytest.mark.parametrize("case", sorted(BAD_SAMPLES))
def test_a_bad_sample_is_refused_by_name(target, tmp_path, capsys, case, arch):
    data = make_data(tmp_path, bad=2, **BAD_SAMPLES[case])
    out = tmp_path / "out"
    rc = train_cli(target, data, out, arch=arch)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "hs_2.safetensors" in err and "Traceback" not in err, err
    assert not out.exists()  # refused before anything was written


def test_multimodal_pad_ids_are_named_as_such(target, tmp_path, capsys):
    data = make_data(tmp_path, bad=1, **BAD_SAMPLES["multimodal_pad"])
    assert train_cli(target, data, tmp_path / "out") == 2
    assert "multimodal" in capsys.readouterr().err


def test_non_finite_target_head_is_refused(tmp_path, capsys):
    """NaN teacher logits made every argmax agree: accuracy 1.0 from nothing."""
    from safetensors.torch import load_file

    tgt = ensure_tiny_target(tmp_path / "t", **SMALL)
    f = tgt / "model.safetensors"
    t = load_file(str(f))
    t["lm_head.weight"][3, 5] = float("nan")
    save_file(t, str(f), metadata={"format": "pt"})
    rc = train_cli(tgt, make_data(tmp_path), tmp_path / "out")
    err = capsys.readouterr().err
    assert rc == 2 and "lm_head.weight" in err and "finite" in err, err


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_a_diverged_draft_is_not_saved(target, tmp_path, capsys, arch):
    out = tmp_path / "out"
    rc = train_cli(target, make_data(tmp_path), out, "--lr", "1e36", "--steps", "4", arch=arch)
    err = capsys.readouterr().err
    assert rc == 2 and "not finite" in err, err
    if out.exists():  # the epochs before the divergence stay in --out (resumable); a non-finite draft never does
        from safetensors.torch import load_file

        assert all(bool(torch.isfinite(v.float()).all()) for v in load_file(str(out / "model.safetensors")).values())


def test_accuracy_over_no_tokens_is_not_perfect():
    from sglang_eagle3_ext.training.mla.train import accuracy

    empty = torch.zeros(0, dtype=torch.long)
    assert accuracy(empty, empty) != accuracy(empty, empty)  # NaN: nothing was measured
    nan = torch.full((4, 7), float("nan"))
    assert accuracy(nan.argmax(-1), nan.argmax(-1), valid=torch.isfinite(nan).all(-1)) != 1.0


def test_loss_masks_of_another_dataset_are_refused(target, tmp_path, capsys):
    """An Arrow dataset beside the files whose rows hold other token ids: its loss masks belong to other
    samples; training on every token instead would be a silent change of the data."""
    import datasets

    data = make_data(tmp_path, n=4)
    rows = {"input_ids": [[1, 2, 3]] * 4, "loss_mask": [[1, 1, 1]] * 4, "seq_len": [3] * 4}
    datasets.Dataset.from_dict(rows).save_to_disk(str(data))
    assert train_cli(target, data, tmp_path / "out", arch="llama") == 2
    err = capsys.readouterr().err
    assert "hs_0.safetensors" in err and "loss_mask" in err, err


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--steps", "-1"),
        ("--epochs", "0"),
        ("--num-workers", "-1"),
        ("--ttt-steps", "0"),
        ("--lr", "0"),
        ("--lr", "nan"),
        ("--train-ratio", "2"),
        ("--log-every", "-5"),
        ("--total-seq-len", "-1"),
    ],
)
def test_a_bad_count_or_rate_is_refused_naming_the_flag(target, tmp_path, capsys, flag, value):
    out = tmp_path / "out"
    assert train_cli(target, make_data(tmp_path), out, flag, value) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()


def test_good_data_still_trains(target, tmp_path):
    out = tmp_path / "out"
    assert train_cli(target, make_data(tmp_path), out) == 0
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


# ---- property: any sample file gives a checked sample or a refusal naming it -----------------------------

_DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.int32, torch.uint8, torch.bool]


@st.composite
def hs_tensors(draw):
    L = draw(st.integers(0, 6))
    t = {}
    shape = draw(st.sampled_from([(L,), (L, 1), (), (L + 1,)]))
    dt = draw(st.sampled_from([torch.int64, torch.int32, torch.float32, torch.uint8]))
    hi = draw(st.sampled_from([V, V + 1, 2_000_000]))
    t["token_ids"] = torch.randint(-2 if dt != torch.uint8 else 0, hi, shape).to(dt)
    if draw(st.booleans()):
        shape = draw(st.sampled_from([(L, 4, H), (L, 3, H), (L, 4, H + 1), (L + 1, 4, H), (L, 4), (L, 4, H, 1)]))
        dt = draw(st.sampled_from(_DTYPES))
        x = torch.randn(shape) * draw(st.sampled_from([1.0, 1e6, float("inf"), float("nan")]))
        t["hidden_states"] = x.to(dt)
    if draw(st.booleans()):
        t["extra"] = torch.zeros(2)
    if draw(st.booleans()):
        t.pop("token_ids", None)
    return t


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors=hs_tensors(), junk=st.sampled_from([None, b"", b"\x00" * 7, b"{", b"\xff" * 64]))
def test_reader_any_sample_is_checked_or_refused_by_name(tmp_path_factory, tensors, junk):
    from sglang_eagle3_ext.training.samples import SampleSpec, load_sample

    d = tmp_path_factory.mktemp("hs")
    p = d / "hs_0.safetensors"
    if junk is not None:
        p.write_bytes(junk)
    else:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(p))
    spec = SampleSpec(n_slots=4, hidden=H, vocab=V)
    try:
        ids, hs = load_sample(p, spec)
    except TrainDraftError as e:
        event("refused")
        assert "hs_0.safetensors" in str(e)
        return
    event("accepted")
    L = ids.shape[0]
    assert ids.dtype == torch.long and ids.dim() == 1 and L >= 1
    assert bool(((ids >= 0) & (ids < V)).all())
    assert tuple(hs.shape) == (L, 4, H) and hs.is_floating_point() and bool(torch.isfinite(hs).all())


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70) | st.text(max_size=3),
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "hf_hidden_state_indices",
                    "layer_ids",
                    "eagle_config",
                    "vocab_size",
                    "hidden_size",
                    "num_hidden_layers",
                    "text_config",
                    "x",
                ]
            ),
            c,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=_json, raw=st.sampled_from([None, "", "{", "[1,", "NaN", "\ufeff{}"]))
def test_metadata_and_target_config_are_read_or_refused_by_name(tmp_path_factory, meta, raw):
    from sglang_eagle3_ext.boundary import BadInput
    from sglang_eagle3_ext.training.data import read_layer_ids_from_metadata
    from sglang_eagle3_ext.training.target_view import text_config

    d = tmp_path_factory.mktemp("meta")
    text = json.dumps(meta) if raw is None else raw
    (d / "metadata.json").write_text(text)
    (d / "config.json").write_text(text)
    try:
        ids, src = read_layer_ids_from_metadata(d)
        assert ids is None or all(type(x) is int and x >= 0 for x in ids)
    except TrainDraftError as e:
        assert "metadata.json" in str(e)
    try:
        cfg = text_config(d)
        assert all(type(cfg[k]) is int and cfg[k] >= 1 for k in ("vocab_size", "hidden_size", "num_hidden_layers"))
    except BadInput as e:
        assert "config.json" in str(e)


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_a_python_caller_trains_without_the_command_line(target, tmp_path, arch):
    """The library's entry with its typed options (the layer ids as a list), as a launcher of its own calls it."""
    from sglang_eagle3_ext.training import TrainOptions, train_draft

    r = train_draft(
        TrainOptions(
            data=make_data(tmp_path),
            target=target,
            out=tmp_path / "out",
            draft_arch=arch,
            device="cpu",
            steps=2,
            layer_ids=list(AUX),
            num_workers=0,
            total_seq_len=256,
            min_val_acc=0,
        )
    )
    assert r["layer_ids"] == AUX and (tmp_path / "out" / "model.safetensors").exists()
