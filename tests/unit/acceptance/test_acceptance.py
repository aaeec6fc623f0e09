"""`sglang-eagle3 eval` on CPU: the simulated verify rounds on drafts whose answer is known by construction
(tests/acceptance_world.py), the batched chain against an explicit per-anchor unroll, d2t, the response region,
the held-out split `train` keeps out, `--url` against a loopback server, and the command line's refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import acceptance_world as W
import pytest
import torch
from helpers import assert_names_its_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext.acceptance import data as adata
from sglang_eagle3_ext.cli.common import run_tool


def _eval(argv, capsys) -> tuple[int, str, str]:
    from sglang_eagle3_ext.cli.eval import main

    rc = run_tool("eval", main, [str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _report(argv, capsys) -> dict:
    rc, out, err = _eval([*argv, "--json", "-", "--dtype", "fp32", "--device", "cpu"], capsys)
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return W.eval_world(tmp_path_factory.mktemp("eval_world"), 12)


# ---------------------------------------------------------------------------------------- known answers


def test_copying_draft_is_right_at_token_one_and_wrong_after(world, capsys):
    """Token 1 comes from the target-fed row (right); tokens 2, 3 from the draft's own state, which still holds
    x_{a+1} (wrong: the sequences never repeat). A simulation feeding step 2 the target's state of row a would
    propose x_{a+2} there and report p2 = 1."""
    rep = _report(["--draft", world["draft"], "--data", world["export"], "--heldout-fraction", "1"], capsys)
    p = [x["p"] for x in rep["positions"]]
    assert p[0] == 1.0 and p[1] == 0.0 and p[2] is None, rep["positions"]
    assert rep["accept_length_every_anchor"] == 2.0
    assert [x["p"] for x in rep["rounds"]["positions"]][:2] == [1.0, 0.0]
    n_tok = sum(len(s) - 1 for s in world["seqs"])  # plain data: everything after token 0
    assert rep["anchors"] == sum(len(s) - 2 for s in world["seqs"])
    # SGLang's figure: every round accepts draft 1 and rejects draft 2, so accepted drafts + 1 is 2 in each,
    # whatever each response's length; tokens / rounds (per request, cut at the end) reads otherwise
    assert rep["predicted_accept_length"] == 2.0 == rep["rounds"]["accept_length"]
    assert rep["rounds"]["tokens"] == n_tok
    assert rep["predicted_accept_length_per_request"] == n_tok / rep["rounds"]["rounds"] != 2.0
    assert rep["heldout"]["samples"] == 12 and rep["samples_per_s"] > 0


def test_d2t_is_applied(world, tmp_path, capsys):
    """Draft id j proposes target id HOT[j] (p1 = 1 above only then); a d2t shifted by one draft id makes every
    proposal another token."""
    t = W.draft_tensors()
    t["d2t"] = torch.tensor(W.HOT[1:] + W.HOT[:1]) - torch.arange(len(W.HOT))
    d = W.write_draft(tmp_path / "rot", tensors=t)
    rep = _report(["--draft", d, "--data", world["export"], "--heldout-fraction", "1"], capsys)
    assert rep["positions"][0]["p"] == 0.0 and rep["accept_length_every_anchor"] == 1.0


def _explicit_tokens(model, hot, ids, aux, a: int, steps: int) -> list[int]:
    """Draft tokens 1..steps at anchor a, each step one plain causal forward over the sequence the draft's KV
    cache holds then: target-fed rows 0..a-1, then this round's draft rows (its tokens, its states)."""
    from sglang_eagle3_ext.acceptance.simulate import _forward, pack

    toks = list(ids[1 : a + 1].tolist())
    hidden = [model.project(aux[:a])]
    out = []
    for _ in range(steps):
        t = torch.tensor(toks)
        h = torch.cat(hidden)
        p = pack([(t, h)], "cpu", torch.float32)
        logits, state = _forward(model, t, h, p.local, p, 0, [])
        d = int(hot[logits[-1].argmax()])
        out.append(d)
        toks.append(d)
        hidden.append(state[-1:])
    return out


@pytest.mark.parametrize("layers", [1, 2])
def test_batched_rounds_equal_an_explicit_unroll(world, tmp_path, layers, monkeypatch):
    """Random weights (attention and MLP live, two layers too): every anchor's draft tokens from the batched
    simulation equal those of an explicit unroll fed the draft's own tokens and states; and the same in blocks
    of a few rows (the attention's memory bound)."""
    from sglang_eagle3_ext.acceptance import drafts, simulate
    from sglang_eagle3_ext.acceptance.simulate import draft_tokens, pack

    d = W.write_draft(
        tmp_path / "rand", W.draft_config(layers=layers), W.draft_tensors(copy=False, layers=layers, scale=0.5)
    )
    loaded = drafts.load(d, world["target"], "cpu", torch.float32)
    seqs = world["seqs"][:3]
    aux = W.states(seqs)
    p = pack([(torch.tensor(s), a) for s, a in zip(seqs, aux)], "cpu", torch.float32)
    steps = 3
    with torch.no_grad():
        got = draft_tokens(loaded.model, p, steps, loaded.hot)
        start, distinct = 0, set()
        for s, a in zip(seqs, aux):
            ids = torch.tensor(s)
            for anchor in (1, 4, len(s) - 2):
                want = _explicit_tokens(loaded.model, loaded.hot, ids, a, anchor, steps)
                c = start + anchor - 1
                assert [int(got[k, c + k]) for k in range(steps)] == want, (anchor, want)
                distinct.add(tuple(want))
            start += len(s)
    assert len(distinct) > 3  # the draft is no constant: the comparison can fail
    monkeypatch.setattr(simulate, "ATTN_BYTES", 4 * 4 * 30 * 5)  # blocks of 2 rows
    with torch.no_grad():
        assert torch.equal(draft_tokens(loaded.model, p, steps, loaded.hot), got)


def test_mla_draft_through_the_command(world, tmp_path, capsys):
    """The MLA layout end to end: draft/arch/mla/net.py, `train --draft-arch mla`'s held-out files, samples
    cut to the draft's RoPE table."""
    from safetensors.torch import save_file

    from sglang_eagle3_ext.draft.arch.mla.net import Eagle3MLADraft
    from sglang_eagle3_ext.training.mla.train import mla_draft_config, save_checkpoint

    yarn = {
        "rope_type": "deepseek_yarn",
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    tcfg = dict(
        vocab_size=W.V,
        hidden_size=W.H,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=2,
        q_lora_rank=24,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=12,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=24,
        rope_scaling=yarn,
    )
    target = tmp_path / "mla_target"
    target.mkdir()
    (target / "config.json").write_text(
        json.dumps({**tcfg, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"})
    )
    save_file(
        {
            "model.embed_tokens.weight": torch.randn(W.V, W.H),
            "lm_head.weight": torch.randn(W.V, W.H),
            "model.norm.weight": torch.ones(W.H),
        },
        str(target / "model.safetensors"),
    )
    torch.manual_seed(0)
    draft = save_checkpoint(
        Eagle3MLADraft(mla_draft_config(tcfg, W.AUX)), mla_draft_config(tcfg, W.AUX), tmp_path / "mla_draft"
    )
    rep = _report(
        ["--draft", draft, "--data", world["export"], "--target", target, "--heldout-fraction", "0.25"], capsys
    )
    assert rep["draft_class"] == "Eagle3DeepseekV2ForCausalLM"
    assert (rep["heldout"]["first"], rep["heldout"]["samples"]) == (9, 3) and "draft-arch mla" in rep["heldout"]["rule"]
    long = sum(len(s) > 24 for s in world["seqs"][9:])
    assert any(f"{long} sample(s) cut to the draft's max_position_embeddings 24" in n for n in rep["notes"]), rep
    assert rep["anchors"] > 0 and rep["predicted_accept_length"] >= 1.0


# ---------------------------------------------------------------------------------------- data and regions


def _masked(seqs, prompt_lens):
    return [[0] * p + [1] * (len(s) - p) for s, p in zip(seqs, prompt_lens)]


def test_response_region_from_an_export_and_a_dump_agree(world, tmp_path, capsys):
    seqs, prompts = world["seqs"], [3 + i % 4 for i in range(len(world["seqs"]))]
    ex = W.write_export(tmp_path / "ex", seqs, world["target"], masks=_masked(seqs, prompts))
    dump = W.write_dump(tmp_path / "dump", seqs, world["target"], prompts)
    a = _report(["--draft", world["draft"], "--data", ex, "--heldout-fraction", "1"], capsys)
    b = _report(["--draft", world["draft"], "--data", dump, "--heldout-fraction", "1"], capsys)
    # anchors a with x_a and x_{a+1} both generated (positions >= the prompt)
    assert a["anchors"] == sum(len(s) - p - 1 for s, p in zip(seqs, prompts))
    assert a["rounds"]["tokens"] == sum(len(s) - p for s, p in zip(seqs, prompts))
    for key in ("anchors", "positions", "rounds", "predicted_accept_length"):
        assert a[key] == b[key], key
    assert b["data_kind"] == "dump" and a["data_kind"] == "export"


def test_heldout_split_is_trains_and_deterministic():
    import types

    from sglang_eagle3_ext.cli import eval as eval_cli
    from sglang_eagle3_ext.cli import train as train_cli
    from sglang_eagle3_ext.draft.arch import llama, mla
    from sglang_eagle3_ext.training.mla.train import _split

    default = eval_cli.build_parser().get_default("heldout_fraction")
    assert round(1 - default, 12) == train_cli.build_parser().get_default("train_ratio")
    for n in (1, 2, 10, 19, 20, 21, 333, 2000):
        ratio = 1 - default
        idx, rule = adata.heldout(n, default, llama)
        assert idx == list(range(int(n * ratio), n)) == adata.heldout(n, default, llama)[0]
        assert set(idx).isdisjoint(range(int(n * ratio))) and "train-ratio 0.95" in rule
        mla_idx, _ = adata.heldout(n, default, mla)
        _, val = _split(types.SimpleNamespace(train_ratio=round(ratio, 12), ttt_steps=0), [8] * n)
        assert mla_idx == (val or list(range(n)))  # the MLA route's validation files (all: it holds none out)
    assert adata.heldout(7, 1.0, llama)[0] == list(range(7))


def test_samples_caps_the_heldout_split(world, capsys):
    rep = _report(
        ["--draft", world["draft"], "--data", world["export"], "--heldout-fraction", "0.5", "--samples", 2], capsys
    )
    h = rep["heldout"]
    assert (h["samples"], h["first"], h["last"], h["capped_by_samples"]) == (2, 6, 7, True)


# ---------------------------------------------------------------------------------------- --url


def test_served_figures_beside_the_prediction(world, tmp_path, capsys):
    """A loopback server answering with the recorded response and SGLang's meta_info: the served accept
    length is completion_tokens / spec_verify_ct, its histogram gives the per-position figures."""
    from trust_client_servers import Replies

    seqs = world["seqs"][:2]
    ex = W.write_export(tmp_path / "ex", seqs, world["target"], masks=_masked(seqs, [4, 4]))

    def reply(body):
        n = body["sampling_params"]["max_new_tokens"]
        full = next(s for s in seqs if s[:4] == body["input_ids"])
        return {
            "output_ids": full[4 : 4 + n],
            "meta_info": {"completion_tokens": n, "spec_verify_ct": 6, "spec_accept_histogram": [1, 2, 2, 1]},
        }

    srv = Replies(
        {
            "/generate": reply,
            "/get_server_info": {
                "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 4,
            },
        }
    )
    try:
        rep = _report(
            ["--draft", world["draft"], "--data", ex, "--heldout-fraction", "1", "--url", srv.url, "--concurrency", 1],
            capsys,
        )
        s = rep["served"]
        n_tok = sum(len(x) - 4 for x in seqs)
        # SGLang's figure: 1 + correct drafts / rounds = 1 + 2 * (2 + 4 + 3) / 12; per request: tokens / rounds
        assert s["accept_length"] == 2.5 and s["accepted_drafts"] == 18 and s["verify_rounds"] == 12
        assert s["accept_length_per_request"] == n_tok / 12 and s["requests"] == 2 and s["outputs_equal_recorded"] == 2
        assert [round(x["p"], 3) for x in s["positions"]] == [0.833, 0.6, 0.333] and s["implausible"] == []
        assert s["difference"] == pytest.approx(rep["predicted_accept_length"] - s["accept_length"])
        srv.routes["/get_server_info"] = {**srv.routes["/get_server_info"], "speculative_num_steps": 5}
        rc, _, err = _eval(["--draft", world["draft"], "--data", ex, "--url", srv.url, "--device", "cpu"], capsys)
        assert rc == 2 and "steps 5" in err and "--steps 3" in err and len(err.strip().splitlines()) == 1, err
        assert len(srv.posts) == 2  # refused before any simulation or request
    finally:
        srv.close()


# ---------------------------------------------------------------------------------------- refusals


def _spec_format(root: Path) -> Path:
    d = root / "spec"
    shutil.copytree(root / "draft", d, dirs_exist_ok=True)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(speculators_model_type="eagle3", architectures=["Eagle3Speculator"])
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _empty_dump(root: Path, target: Path) -> Path:
    d = W.write_dump(root / "empty_dump", [], target, [])
    (d / "manifests" / "dp0.jsonl").write_text("")
    return d


REFUSALS = {
    "topk": (["--topk", "2"], "topk 1 only"),
    "draft_tokens": (["--draft-tokens", "5"], "--draft-tokens 4"),
    "speculators": (["--draft", "{spec}"], "sglang-eagle3 convert"),
    "no_export_files": (["--data", "{root}"], "neither a dump dir"),
    "empty_dump": (["--data", "{empty}"], "no samples to evaluate"),
    "no_draft": (["--draft", "{root}/nothing"], "no such folder"),
    "other_layers": (["--data", "{other}"], "feeds this draft [1, 2, 3]"),
    "json_dir": (["--json", "{root}"], "is a folder"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_are_one_line_exit_2(world, case, tmp_path, capsys):
    root = world["root"]
    paths = {
        "spec": _spec_format(root),
        "root": tmp_path,
        "empty": _empty_dump(tmp_path, world["target"]),
        "other": W.write_export(tmp_path / "other", world["seqs"][:2], world["target"], layers=[2, 3, 4]),
    }
    extra, needle = REFUSALS[case]
    extra = [x.format(**paths) for x in extra]
    base = {"--draft": str(world["draft"]), "--data": str(world["export"])}
    for flag in ("--draft", "--data"):
        if flag in extra:
            base[flag] = extra.pop(extra.index(flag) + 1)
            extra.remove(flag)
    rc, out, err = _eval([*[x for kv in base.items() for x in kv], *extra, "--device", "cpu"], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("python -m sglang_eagle3_ext.cli.eval: error:"), err
    assert needle in lines[0] and "Traceback" not in err, err


FLAG_VALUES = st.sampled_from(["0", "1", "2", "3", "4", "-1", "0.5", "1.5", "x", "", "nan", "1e9"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=FLAG_VALUES,
    topk=FLAG_VALUES,
    tokens=st.one_of(st.none(), FLAG_VALUES),
    frac=FLAG_VALUES,
    samples=st.one_of(st.none(), FLAG_VALUES),
)
def test_any_flag_values_exit_0_or_2(world, capsys, steps, topk, tokens, frac, samples):
    argv = [
        "--draft",
        world["draft"],
        "--data",
        world["export"],
        "--steps",
        steps,
        "--topk",
        topk,
        "--heldout-fraction",
        frac,
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--quiet",
    ]
    argv += ["--draft-tokens", tokens] if tokens is not None else []
    argv += ["--samples", samples] if samples is not None else []
    rc, out, err = _eval(argv, capsys)
    assert rc in (0, 2) and "Traceback" not in err and "a bug" not in err, err
    if rc == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert_names_its_input(err, "--steps", "--topk", "--heldout-fraction", "--draft-tokens", "--samples")


JSON_BITS = st.sampled_from(
    [
        "{}",
        "[]",
        "null",
        '{"layer_indices_hf": "x"}',
        '{"layer_indices_hf": [1, 2]}',
        '{"layer_indices_hf": [-1, 2, 3]}',
        '{"model_path": 5}',
        '{"architectures": 3}',
        '{"architectures": ["LlamaForCausalLMEagle3"]}',
        "\x00\xff",
        "",
    ]
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(
        [
            "draft/config.json",
            "export/sge3_dump_meta.json",
            "export/hidden_states/hs_3.safetensors",
            "draft/model.safetensors",
        ]
    ),
    text=st.one_of(JSON_BITS, st.binary(max_size=64).map(lambda b: b.decode("latin-1"))),
    keep=st.integers(0, 400),
)
def test_any_damaged_input_exits_0_or_2_and_writes_nothing(world, capsys, which, text, keep):
    """A file of the draft or the data replaced (JSON of the wrong shape, bytes) or cut short: exit 0 or 2 with
    one line, never a traceback; nothing under the inputs changes."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="evalprop"))
    try:
        for name in ("draft", "export", "target"):
            shutil.copytree(world[name], root / name)
        f = root / which
        data = f.read_bytes()
        f.write_bytes(data[:keep] if f.suffix == ".safetensors" and keep < len(data) else text.encode("latin-1"))
        before = sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*"))
        rc, out, err = _eval(
            [
                "--draft",
                root / "draft",
                "--data",
                root / "export",
                "--target",
                root / "target",
                "--heldout-fraction",
                "1",
                "--device",
                "cpu",
                "--dtype",
                "fp32",
                "--quiet",
            ],
            capsys,
        )
        assert rc in (0, 2) and "Traceback" not in err and "a bug" not in err, err
        assert rc == 0 or len(err.strip().splitlines()) == 1, err
        if rc == 2:
            assert_names_its_input(err, f.name, f.parent)
        assert sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*")) == before
    finally:
        shutil.rmtree(root)
