"""train --init-from DIR: a run continues from an existing draft's weights (the same recipe), DIR in SGLang's
serving layout (what `convert` writes) or speculators' format (what `train` writes); a DIR that cannot be
continued exactly is refused, naming DIR and the fix. Tiny models on CPU (the world of test_train_draft.py)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV3ForCausalLM"):
    pytest.skip("transformers has no DeepseekV3ForCausalLM", allow_module_level=True)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from test_train_draft import SMALL, _train, world  # noqa: E402,F401 - the shared module fixture and run

from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.training import TrainDraftError, TrainOptions, init_from  # noqa: E402

SHAPE = ["--num-layers", "2", "--intermediate-size", "96", "--draft-vocab-size", "128"]
FROZEN_STEP = ["--steps", "1", "--lr", "1e-12"]  # one step that cannot move a bf16 weight


def _weights(d):
    return load_file(str(d / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if x.is_floating_point():
            if not torch.allclose(x.float(), y.float(), rtol=1.6e-2, atol=1e-5):  # bf16's tolerance
                return False
        elif not torch.equal(x, y):
            return False
    return True


@pytest.fixture(scope="module")
def llama(world):
    """A 2-layer draft with its own vocabulary, trained 2 real steps; and the same draft in SGLang's layout with
    a draft-vocab mapping that is not the one the data gives (DIR's must win)."""
    from sglang_eagle3_ext.draft.convert import convert

    base = world["root"] / "init_base"
    _train(world, base, *SHAPE, "--steps", "2", "--lr", "1e-2", "--seed", "1")
    sglang = world["root"] / "init_sglang"
    convert(base, sglang, sglang_version="0.5.16", progress=False, log=lambda *_: None)
    sd = _weights(sglang)
    chosen = (torch.arange(128) + sd["d2t"]).tolist()
    other = next(t for t in range(SMALL["vocab_size"]) if t not in chosen)
    chosen = sorted(chosen[1:] + [other])  # one draft token now maps to another target token
    sd["d2t"] = torch.tensor(chosen) - torch.arange(128)
    sd["t2d"] = torch.zeros(SMALL["vocab_size"], dtype=torch.bool)
    sd["t2d"][chosen] = True
    save_file(sd, str(sglang / "model.safetensors"), metadata={"format": "pt"})
    return {"base": base, "sglang": sglang}


def test_continues_from_the_sglang_layout(world, llama, tmp_path, capsys):
    dir_ = llama["sglang"]
    r = _train(world, tmp_path / "cont", "--init-from", str(dir_), *FROZEN_STEP)
    assert r["init_from"] == str(dir_)
    out = capsys.readouterr().out
    assert f"continuing from {dir_}" in out
    assert "draft vocabulary: the mapping of --init-from" in out  # said once, with the reason
    new, base, sgl = _weights(tmp_path / "cont"), _weights(llama["base"]), _weights(dir_)
    assert torch.equal(new["d2t"], sgl["d2t"]) and torch.equal(new["t2d"], sgl["t2d"])
    assert not torch.equal(new["d2t"], base["d2t"])  # the data's mapping lost
    # the second layer's norm is hidden_norm in SGLang's layout, input_layernorm in speculators'
    assert "layers.1.hidden_norm.weight" in sgl and "layers.1.input_layernorm.weight" in new
    rest = {k for k in base if k not in ("d2t", "t2d")}
    assert _same({k: new[k] for k in rest}, {k: base[k] for k in rest})
    cfg = json.loads((tmp_path / "cont" / "config.json").read_text())
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 2  # DIR's shape, no flag given
    assert cfg["transformer_layer_config"]["intermediate_size"] == 96 and cfg["draft_vocab_size"] == 128


def test_continues_from_speculators_format_and_differs_without_it(world, llama, tmp_path):
    r = _train(world, tmp_path / "cont", "--init-from", str(llama["base"]), *FROZEN_STEP)
    assert r["init_from"] == str(llama["base"])
    base = _weights(llama["base"])
    assert _same(_weights(tmp_path / "cont"), base)
    _train(world, tmp_path / "fresh", *SHAPE, *FROZEN_STEP)
    assert not _same(_weights(tmp_path / "fresh"), base)  # the comparison can fail


def test_resume_takes_the_weights_from_its_checkpoint_and_the_mapping_from_dir(world, llama, tmp_path, capsys):
    dir_, out = llama["sglang"], tmp_path / "cont"
    _train(world, out, "--init-from", str(dir_), "--epochs", "1", "--lr", "1e-4")
    capsys.readouterr()
    r = _train(world, out, "--init-from", str(dir_), "--epochs", "2", "--lr", "1e-4", "--resume")
    said = capsys.readouterr().out
    assert r["epochs"] == 2 and r["init_from"] == str(dir_)
    assert "not loaded again" in said and "continuing from" not in said
    assert torch.equal(_weights(out)["d2t"], _weights(dir_)["d2t"])  # DIR's mapping, kept across the resume


def test_mla_continues_from_its_draft(world, tmp_path):
    base = tmp_path / "base"
    mla = ["--ttt-steps", "2"]
    _train(
        world,
        base,
        "--draft-arch",
        "mla",
        "--intermediate-size",
        "96",
        "--steps",
        "2",
        "--lr",
        "1e-2",
        "--seed",
        "1",
        *mla,
    )
    r = _train(world, tmp_path / "cont", "--init-from", str(base), *FROZEN_STEP, *mla)  # the layout: DIR's
    assert r["init_from"] == str(base)
    assert _same(_weights(tmp_path / "cont"), _weights(base))
    assert json.loads((tmp_path / "cont" / "config.json").read_text())["intermediate_size"] == 96
    _train(world, tmp_path / "fresh", "--draft-arch", "mla", "--intermediate-size", "96", *FROZEN_STEP, *mla)
    assert not _same(_weights(tmp_path / "fresh"), _weights(base))


# --- refusals: before anything is trained -------------------------------------------------------------


@pytest.fixture
def broken(llama, tmp_path):
    d = tmp_path / "dir"
    shutil.copytree(llama["sglang"], d)
    return d


def _edit(d, fn):
    sd = _weights(d)
    fn(sd)
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})


def test_refuses_a_missing_tensor(world, broken, tmp_path):
    _edit(broken, lambda sd: sd.pop("layers.1.mlp.down_proj.weight"))
    with pytest.raises(TrainDraftError, match=r"--init-from .*dir.*layers\.1\.mlp\.down_proj\.weight.*missing"):
        _train(world, tmp_path / "o", "--init-from", str(broken), *FROZEN_STEP)
    assert not (tmp_path / "o").exists()


def test_refuses_an_unknown_key(world, broken, tmp_path):
    _edit(broken, lambda sd: sd.__setitem__("extra_head.weight", torch.zeros(4)))
    with pytest.raises(TrainDraftError, match=r"extra_head\.weight"):
        _train(world, tmp_path / "o", "--init-from", str(broken), *FROZEN_STEP)


def test_refuses_a_tensor_of_another_shape(world, broken, tmp_path):
    _edit(broken, lambda sd: sd.__setitem__("layers.0.mlp.up_proj.weight", torch.zeros(64, SMALL["hidden_size"])))
    with pytest.raises(TrainDraftError, match=r"up_proj.*\[64, 64\].*expected \[96, 64\]"):
        _train(world, tmp_path / "o", "--init-from", str(broken), *FROZEN_STEP)


def _nan(sd):
    sd["fc.weight"][0, 0] = float("nan")


def _t2d_elsewhere(sd):
    sd["t2d"] = sd["t2d"].roll(1)


def _descending(sd):
    ids = (torch.arange(128) + sd["d2t"]).flip(0)
    sd["d2t"] = ids - torch.arange(128)


@pytest.mark.parametrize(
    "edit, said",
    [(_nan, r"fc\.weight has 1 NaN/Inf"), (_t2d_elsewhere, "its t2d does not mark"), (_descending, "ascending order")],
)
def test_refuses_values_it_cannot_continue(world, broken, tmp_path, edit, said):
    _edit(broken, edit)
    with pytest.raises(TrainDraftError, match=said):
        _train(world, tmp_path / "o", "--init-from", str(broken), *FROZEN_STEP)


@pytest.mark.parametrize(
    "flags, name",
    [
        (["--intermediate-size", "64"], "--intermediate-size"),
        (["--num-layers", "3"], "--num-layers"),
        (["--num-layers", "1"], "--num-layers"),  # a fresh run's default, given
        (["--draft-vocab-size", "200"], "--draft-vocab-size"),
        (["--layer-ids", "0,1,2"], "--layer-ids"),
        (["--draft-arch", "mla"], "--draft-arch"),
    ],
)
def test_refuses_a_conflicting_shape_flag(world, llama, tmp_path, flags, name):
    with pytest.raises(TrainDraftError, match=f"{name} .*conflicts with --init-from"):
        _train(world, tmp_path / "o", "--init-from", str(llama["sglang"]), *flags, *FROZEN_STEP)


def test_no_config_is_exit_2_naming_dir_and_fix(world, broken, tmp_path, capsys):
    (broken / "config.json").unlink()
    rc = train_cli.main(
        [
            "--data",
            str(world["data"]),
            "--target",
            str(world["target"]),
            "--out",
            str(tmp_path / "o"),
            "--device",
            "cpu",
            "--init-from",
            str(broken),
            *FROZEN_STEP,
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: --init-from" in err and str(broken) in err and "config.json" in err


def test_the_model_must_take_every_trainable_tensor():
    """The last line of defence, against the model actually built: every trainable parameter from DIR, every DIR
    tensor taken."""
    m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    m[1].weight.requires_grad_(False)
    full = {k: v.detach().clone() + 1 for k, v in m.state_dict().items()}
    kept = m[1].weight.detach().clone()
    with pytest.raises(TrainDraftError, match=r"0\.bias.*same shape: same --num-layers"):
        init_from.load_into(m, {k: v for k, v in full.items() if k != "0.bias"}, "DIR")
    with pytest.raises(TrainDraftError, match=r"0\.weight \[4, 2\] in DIR, the model's is \[3, 2\]"):
        init_from.load_into(m, {**full, "0.weight": torch.zeros(4, 2)}, "DIR")
    with pytest.raises(TrainDraftError, match=r"nothing in the model takes.*stray"):
        init_from.load_into(m, {**full, "stray": torch.zeros(1)}, "DIR")
    n = init_from.load_into(m, {k: v for k, v in full.items() if k != "1.weight"}, "DIR")  # frozen: the target's
    assert n == 3 and torch.equal(m[0].weight, full["0.weight"]) and torch.equal(m[1].weight, kept)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(-2, 9), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.dictionaries(
        st.sampled_from(
            [
                "architectures",
                "hidden_size",
                "num_hidden_layers",
                "intermediate_size",
                "num_attention_heads",
                "head_dim",
                "draft_vocab_size",
                "vocab_size",
                "eagle_config",
                "num_key_value_heads",
                "speculators_model_type",
                "transformer_layer_config",
                "fc_norm",
                "target_hidden_size",
            ]
        ),
        _VALUES,
        min_size=1,
        max_size=3,
    )
)
def test_any_config_is_read_or_refused(world, llama, tmp_path_factory, edits):
    d = tmp_path_factory.mktemp("prop") / "dir"
    shutil.copytree(llama["sglang"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(edits)
    (d / "config.json").write_text(json.dumps(cfg))
    opts = TrainOptions(data=world["data"], target=world["target"], out=d.parent / "o", init_from=d)
    try:
        init_from.resolve_options(opts)
    except TrainDraftError as e:
        assert str(d) in str(e)
