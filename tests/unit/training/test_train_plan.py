"""`train --dry-run`: the plan's parameter counts are the trained drafts', its memory per rank is within 15 % of
what a run takes, it sizes Kimi-K2.5's width from a config.json alone, and any config.json gives a plan or a
one-line refusal (exit 0 or 2).

The measured peak: torch's profiler with `profile_memory=True` records every allocation and free of the CPU
allocator with its time; the running sum of those over the whole `train_draft` call (one epoch, every
micro-batch of the plan's length or shorter) has its maximum at the run's peak of live tensor bytes.
"""

from __future__ import annotations

import functools
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("speculators.train.cli")
from helpers import assert_names_its_input  # noqa: E402
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_train_distributed import world  # noqa: E402,F401 - the shared module fixture

from sglang_eagle3_ext.cli import train as train_command  # noqa: E402
from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402
from sglang_eagle3_ext.training import TrainOptions, train_draft  # noqa: E402

KIMI = dict(
    hidden_size=7168,
    vocab_size=163840,
    num_attention_heads=64,
    num_key_value_heads=64,
    q_lora_rank=1536,
    kv_lora_rank=512,
    intermediate_size=18432,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    num_hidden_layers=61,
    max_position_embeddings=262144,
    rope_scaling={
        "type": "yarn",
        "factor": 64.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 1.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
)
RUN = dict(device="cpu", global_batch=1, total_seq_len=128, num_workers=0, min_val_acc=0, log_every=1000)


def _opts(world, out, arch, **kw) -> TrainOptions:
    return TrainOptions(data=world["data"], target=world["target"], out=out, draft_arch=arch, **{**RUN, **kw})


def measured_peak(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    now = peak = 0
    for _, n in events:
        now += n
        peak = max(peak, now)
    return peak


@pytest.fixture(scope="module")
def trained(world):
    """One epoch of each draft, its peak measured, beside the plan of the same run."""
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for arch in ("mla", "llama"):
            plan = train_draft(_opts(world, None, arch, dry_run=True))
            o = world["root"] / f"plan_{arch}"
            peak = measured_peak(lambda o=o, arch=arch: train_draft(_opts(world, o, arch, epochs=1)))
            out[arch] = (plan, peak, o)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_the_plans_memory_is_within_15_percent_of_the_measured_peak(trained, arch):
    plan, peak, _ = trained[arch]
    est = plan["per_rank_bytes"]["total"]
    assert abs(est - peak) <= 0.15 * peak, (est, peak, plan["per_rank_bytes"])
    assert plan["per_rank_bytes"]["activations"] > 0 and plan["fits"] is None


def test_the_plan_counts_the_trained_drafts_parameters(trained):
    from speculators.models.eagle3 import Eagle3DraftModel

    from sglang_eagle3_ext.training.mla.train import load_checkpoint

    mla = load_checkpoint(trained["mla"][2])
    assert trained["mla"][0]["params"]["total"] == sum(p.numel() for p in mla.parameters())
    assert trained["mla"][0]["params"]["frozen"] == mla.embed_tokens.weight.numel()
    llama = Eagle3DraftModel.from_pretrained(str(trained["llama"][2]))
    counts = trained["llama"][0]["params"]
    assert counts["total"] == sum(p.numel() for p in llama.parameters())
    assert counts["trainable"] == sum(p.numel() for p in llama.parameters() if p.requires_grad)


@pytest.mark.parametrize("arch", ["mla", "llama"])
def test_kimi_width_from_a_config_alone(tmp_path, world, arch):
    cfg = json.loads((world["target"] / "config.json").read_text())
    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(json.dumps({**cfg, **KIMI}))
    common = [
        "--dry-run",
        "--target",
        str(tmp_path / "kimi"),
        "--draft-arch",
        arch,
        "--device",
        "cuda",
        "--total-seq-len",
        "4096",
        "--world-size",
        "8",
        "--global-batch",
        "16",
    ]
    train = functools.partial(run_tool, "train", train_command.main)
    assert train([*common, "--device-memory-gib", "8", "--json", str(tmp_path / "a")]) == 0
    small = json.loads((tmp_path / "a").read_text())
    assert small["vocab_size"] == 163840 and small["hidden_size"] == 7168 and small["world_size"] == 8
    assert small["accumulation"] == 2 and small["tokens_per_step"] == 16 * 4096
    assert small["params"]["frozen"] >= 163840 * 7168  # the target's embedding, frozen
    assert small["fits"] is False and "does not fit" in small["warnings"][0]
    assert train([*common, "--device-memory-gib", "141", "--json", str(tmp_path / "b")]) == 0
    big = json.loads((tmp_path / "b").read_text())
    assert big["fits"] is True and not big["warnings"] and big["per_rank_gib"] == small["per_rank_gib"]


def test_dry_run_needs_neither_data_nor_out_but_training_does(world, capsys):
    target = str(world["target"])
    assert run_tool("train", train_command.main, ["--dry-run", "--target", target, "--draft-arch", "mla"]) == 0
    assert "memory per rank:" in capsys.readouterr().out
    assert run_tool("train", train_command.main, ["--target", str(world["target"])]) == 2
    assert "required: --data, --out" in capsys.readouterr().err


_value = (
    st.integers(-2, 300)
    | st.none()
    | st.booleans()
    | st.text(max_size=3)
    | st.floats(allow_nan=True)
    | st.dictionaries(
        st.sampled_from(["type", "factor", "rope_type"]), st.integers(0, 4) | st.text(max_size=4), max_size=2
    )
)
_fields = st.sampled_from(
    [
        "hidden_size",
        "vocab_size",
        "num_attention_heads",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "intermediate_size",
        "rope_scaling",
        "max_position_embeddings",
        "rms_norm_eps",
        "num_hidden_layers",
        "rope_theta",
    ]
)


@pytest.mark.parametrize("arch", ["mla", "llama"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(_fields, _value, min_size=1, max_size=3))
@example(changes={"hidden_size": 9, "num_attention_heads": 4})  # a head size of 2 that does not divide 9
def test_any_target_config_gives_a_plan_or_a_one_line_refusal(world, tmp_path_factory, capsys, arch, changes):
    d = tmp_path_factory.mktemp("cfg")
    cfg = json.loads((world["target"] / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **changes}))
    rc = run_tool(
        "train",
        train_command.main,
        [
            "--dry-run",
            "--target",
            str(d),
            "--draft-arch",
            arch,
            "--device",
            "cpu",
            "--total-seq-len",
            "16",
            "--ttt-steps",
            "2",
        ],
    )
    err = capsys.readouterr().err
    assert rc in (0, 2), err
    assert rc == 0 or (len(err.strip().splitlines()) == 1 and "error:" in err), err
    if rc == 2:
        assert_names_its_input(err, d)
    assert sorted(p.name for p in d.iterdir()) == ["config.json"]
