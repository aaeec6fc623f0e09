"""`train --dry-run` is bounded: it reads configs only and answers at once for any size (a thousand layers on eight
ranks, a sequence of 10^12 tokens), builds no model, refuses what the run would refuse before its first step with the
run's own line, and predicts the memory and the time. Its arithmetic counts the parameters of the drafts the routes
build, for any shape."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("speculators.train.cli")
from train_world import SMALL, write_samples  # noqa: E402

from sglang_eagle3_ext.cli import train as train_cli  # noqa: E402
from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402
from sglang_eagle3_ext.training import TrainOptions, train_draft  # noqa: E402

SECONDS = 20  # what the slowest of these plans may take on a loaded 2-core box (each takes well under one)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("dry_run")
    target = ensure_tiny_target(root / "target", **SMALL)
    return {"root": root, "target": target, "data": write_samples(root / "data", 4, lambda i: 20 + 3 * i)}


class _TooLong(Exception):
    pass


def plan(world, **kw) -> dict:
    """The plan, given at most SECONDS."""

    def stop(*_):
        raise _TooLong(f"the plan took more than {SECONDS} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(SECONDS)
    try:
        return train_draft(TrainOptions(data=None, target=world["target"], out=None, dry_run=True, device="cpu", **kw))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize(
    "arch,kw",
    [
        ("llama", dict(num_layers=1000, world_size=8, global_batch=8)),
        ("llama", dict(total_seq_len=10**12)),
        ("mla", dict(total_seq_len=10**12)),
        ("llama", dict(ttt_steps=10**4, intermediate_size=10**9)),
    ],
)
def test_absurd_sizes_answer_at_once(world, monkeypatch, arch, kw):
    def built(*a, **k):
        raise AssertionError("the plan built a module")

    plan(world, draft_arch=arch)  # the imports, once
    monkeypatch.setattr(torch.nn.Module, "__init__", built)
    p = plan(world, draft_arch=arch, **kw)
    assert p["per_rank_bytes"]["total"] > 2**36 and p["fits"] is None  # 64 GiB or more: said, not allocated
    assert p["time"]["step_s"] > 0


def test_a_plan_needs_no_torch(world):
    """The Llama route's plan imports neither torch nor speculators: nothing is built or traced."""
    code = (
        "import sys; from sglang_eagle3_ext.training import TrainOptions, train_draft; "
        f"train_draft(TrainOptions(data=None, target={str(world['target'])!r}, out=None, dry_run=True, device='cpu', "
        "draft_arch='llama', num_layers=1000)); print(sorted(m for m in ('torch', 'speculators') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


def test_the_plan_layers_and_tokens_scale_as_counted(world):
    one, eleven, many = (plan(world, draft_arch="llama", num_layers=n) for n in (1, 11, 21))
    for key in ("trainable", "total"):  # each later layer is alike: the counts grow by the same step
        assert many["params"][key] - eleven["params"][key] == eleven["params"][key] - one["params"][key] > 0
    assert many["params"]["frozen"] == one["params"]["frozen"]
    acts = [p["per_rank_bytes"]["activations"] for p in (one, eleven, many)]
    assert acts[2] - acts[1] == pytest.approx(acts[1] - acts[0], rel=1e-6) and acts[1] > acts[0]
    short, long = plan(world, draft_arch="mla", total_seq_len=512), plan(world, draft_arch="mla", total_seq_len=1024)
    assert long["per_rank_bytes"]["activations"] > 2 * short["per_rank_bytes"]["activations"]  # T^2 masks
    assert long["time"]["step_s"] > 2 * short["time"]["step_s"]


def test_the_plan_prints_memory_and_time(world, capsys, tmp_path):
    argv = ["--dry-run", "--target", str(world["target"]), "--data", str(world["data"]), "--device", "cpu"]
    assert run_tool("train", train_cli.main, [*argv, "--draft-arch", "mla", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "memory per rank:" in out and "time: ~" in out and "for 6 steps" in out, out  # 3 train samples x 2
    assert run_tool("train", train_cli.main, [*argv, "--json", str(tmp_path / "p.json")]) == 0
    t = json.loads((tmp_path / "p.json").read_text())["time"]
    assert t["steps"] == 10 and t["run_s"] == pytest.approx(10 * t["step_s"]) and t["flops_per_token"] > 0


# ---- the run's refusals, said by the plan ----------------------------------------------------------------------
def _data(world, name, n=4, length=24, **kw):
    return write_samples(world["root"] / name, n, length, **kw)


def _narrow(world):  # sample 0's states 32 wide, the target's hidden size 64
    return _data(world, "narrow", replace={0: {"hidden_states": torch.randn(24, 4, 32).bfloat16()}})


# what the run refuses before its first step: (arch, flags, data maker or None, what both lines say)
REFUSED = {
    "draft-vocab-above-the-targets": ("llama", ["--draft-vocab-size", "100000"], None, "must be in [1, 256]"),
    "no-validation-share": ("llama", ["--train-ratio", "1"], None, "--train-ratio 1: speculators' trainer"),
    "repeated-layer-id": ("llama", ["--layer-ids", "1,1,2"], None, "layer ids [1, 1, 2] (--layer-ids"),
    "layer-id-past-the-target": ("mla", ["--layer-ids", "1,2,4"], None, "indices in [0, 3]"),
    "mla-with-two-layers": ("mla", ["--num-layers", "2"], None, "exactly one layer (--num-layers 1)"),
    "mla-with-a-draft-vocab": ("mla", ["--draft-vocab-size", "128"], None, "the full target vocabulary"),
    "global-batch-not-over-the-ranks": ("mla", ["--global-batch", "3", "--world-size", "2"], None, "multiple of"),
    "one-sample": ("llama", [], lambda w: _data(w, "one", n=1), "need at least 2 samples"),
    "samples-too-short": ("mla", ["--ttt-steps", "3"], lambda w: _data(w, "short", length=4), "fewer than 5 tokens"),
    "states-of-another-width": ("mla", [], _narrow, "hidden_states is [24, 4, 32], expected [24, 4, 64]"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_plan_refuses_what_the_run_refuses(world, capsys, tmp_path, case):
    arch, flags, make, says = REFUSED[case]
    data = make(world) if make else world["data"]
    common = ["--target", str(world["target"]), "--data", str(data), "--draft-arch", arch, "--device", "cpu", *flags]
    assert run_tool("train", train_cli.main, ["--dry-run", *common]) == 2
    planned = capsys.readouterr().err.strip().splitlines()
    assert len(planned) == 1 and says in planned[0], planned
    if "--world-size" in flags:  # a plan for ranks this process does not have: no run to compare with
        return
    run = ["--out", str(tmp_path / "out"), "--epochs", "1", "--num-workers", "0", "--min-val-acc", "0"]
    assert run_tool("train", train_cli.main, [*common, *run, "--total-seq-len", "128"]) == 2
    said = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert len(said) == 1 and says in said[0], said  # the run refuses it the same way
    assert not (tmp_path / "out").exists()


# ---- the counts are the built drafts' --------------------------------------------------------------------------
_shape = st.fixed_dictionaries(
    {
        "hidden_size": st.sampled_from([32, 64, 96]),
        "vocab_size": st.integers(8, 300),
        "num_attention_heads": st.sampled_from([1, 2, 4]),
        "q_lora_rank": st.integers(1, 40),
        "kv_lora_rank": st.integers(1, 40),
        "qk_rope_head_dim": st.sampled_from([2, 4, 8]),
        "qk_nope_head_dim": st.integers(1, 16),
        "v_head_dim": st.integers(1, 16),
        "intermediate_size": st.integers(1, 200),
        "num_hidden_layers": st.just(8),
        "max_position_embeddings": st.integers(16, 4096),
    }
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tcfg=_shape,
    K=st.integers(1, 4),
    layers=st.integers(1, 3),
    head_dim=st.sampled_from([None, 8, 16, 32]),
    dvs=st.none() | st.integers(1, 8),
)
def test_the_counted_parameters_are_the_built_drafts(tcfg, K, layers, head_dim, dvs):
    from types import SimpleNamespace

    from sglang_eagle3_ext.draft.arch.mla.net import Eagle3MLADraft
    from sglang_eagle3_ext.training.mla.plan import _mla_config, mla_shapes
    from sglang_eagle3_ext.training.speculators.draft_config import draft_layer_config, meta_model
    from sglang_eagle3_ext.training.speculators.plan import llama_shapes

    def count(model, skip=()):
        total = sum(p.numel() for p in model.parameters())
        trained = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and n not in skip)
        return total, trained, sum(b.numel() * b.element_size() for b in model.buffers())

    cfg = _mla_config(tcfg, K, None)
    with torch.device("meta"):
        mla = Eagle3MLADraft(cfg)
    got = mla_shapes(cfg, K)
    assert (got["total"], got["trainable"], got["buffers"]) == count(mla, skip={"embed_tokens.weight"})
    if head_dim is not None and tcfg["hidden_size"] % head_dim:
        return
    dcfg = draft_layer_config(tcfg, num_layers=layers, head_dim=head_dim)
    dv = min(dvs or tcfg["vocab_size"], tcfg["vocab_size"])
    llama = meta_model(dcfg, tcfg, list(range(1, K + 1)), dv, 3, "/nonexistent")
    got = llama_shapes(dcfg, K, dv)
    assert (got["total"], got["trainable"], got["buffers"]) == count(llama), SimpleNamespace(**dcfg)
