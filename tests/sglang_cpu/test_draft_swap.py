"""Swapping the draft of a running server, scheduler side, on the real SGLang classes (CPU): SGLang's own
SchedulerWeightUpdaterManager takes /update_weights_from_disk's request object with our load_format and loads a
new draft into a real LlamaForCausalLMEagle3 in place (same storage, new values, the worker's token map too), the
target's embeddings untouched; a bad draft (fc of 1 x hidden, a NaN, other HF indices, another vocabulary) is
refused with the served draft bit-identical; a failure after the weights were written puts the old draft back."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
import torch
from helpers import LLAMA, checkpoint_tensors, edited_draft, load_draft, serving, stub_deepseek_target

from sglang_eagle3_ext.draft import errors as E
from sglang_eagle3_ext.in_server.draft import swap

pytestmark = pytest.mark.sglang
pytest.importorskip("speculators")
AUX = (2, 4, 6)


def _draft(root, name, **kw):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    return convert(
        make_speculators_draft(root / f"{name}_spec", **{"aux_ids": AUX, **kw}), root / name, log=lambda *_: None
    )


@pytest.fixture(scope="module")
def drafts(ext, tmp_path_factory):
    from malformed_drafts import make_variant

    from sglang_eagle3_ext.tiny.llama_draft import write_target_config

    root = tmp_path_factory.mktemp("swap")
    out = {
        "target": write_target_config(root / "target"),
        "served": _draft(root, "served", seed=0),
        "new": _draft(root, "new", seed=1),
        "other_layers": _draft(root, "other_layers", seed=2, aux_ids=(1, 3, 5)),
        "other_vocab": _draft(root, "other_vocab", seed=3, draft_vocab=32),
    }
    for variant in ("fc_1xH", "nan_weight"):
        out[variant] = make_variant(out["new"], variant, root / variant)[1]
    out["with_embed"] = _with_embeddings(out["new"], root / "with_embed")
    return out


def _with_embeddings(good, out):
    """A draft whose files also hold trained embeddings (SGLang loads them, then installs the target's)."""
    import shutil

    from malformed_drafts import edit_tensors

    shutil.copytree(good, out)
    edit_tensors(out, lambda t: t.__setitem__("embed_tokens.weight", torch.randn(128, 64).to(t["fc.weight"].dtype)))
    return out


def _scheduler(model, target):
    """SGLang's weight updater over `model` served the way the EAGLE worker leaves it: the target's embeddings
    installed (set_embed), the worker holding its own copy of the token map."""
    from sglang.srt.managers.scheduler_components.weight_updater import SchedulerWeightUpdaterManager
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    target.embed = torch.nn.Parameter(torch.randn(128, 64).to(model.model.fc.weight.dtype), requires_grad=False)
    model.set_embed(target.embed)
    inner = EagleDraftWorker.__new__(EagleDraftWorker)
    inner.draft_runner = types.SimpleNamespace(model=model)
    inner.hot_token_id = model.hot_token_id.clone()
    spec_worker = EAGLEWorkerV2.__new__(EAGLEWorkerV2)
    spec_worker._draft_worker = inner
    flushes = []
    # the release's class and method; its fields set directly (the constructor's other fields vary by release)
    manager = SchedulerWeightUpdaterManager.__new__(SchedulerWeightUpdaterManager)
    given = {
        "tp_worker": types.SimpleNamespace(model_runner=types.SimpleNamespace(model=target)),
        "draft_worker": spec_worker,
        "flush_cache": lambda **kw: flushes.append(kw) or True,
    }
    for f in dataclasses.fields(SchedulerWeightUpdaterManager):
        setattr(manager, f.name, given.get(f.name))
    return types.SimpleNamespace(manager=manager, model=model, worker=inner, target=target, flushes=flushes)


@pytest.fixture
def server(ext, drafts, monkeypatch):
    monkeypatch.setattr(swap, "_served", {})
    model = load_draft(ext, drafts["served"], drafts["target"], LLAMA)
    target = stub_deepseek_target(8)
    target.model.layers_to_capture = list(AUX)
    with serving(ext, drafts["target"], drafts["served"]):
        yield _scheduler(model, target)


def _request(path, load_format=swap.LOAD_FORMAT):
    from sglang.srt.managers.io_struct import UpdateWeightFromDiskReqInput

    return UpdateWeightFromDiskReqInput(model_path=str(path), load_format=load_format)


def _snapshot(s):
    return {n: (p.data_ptr(), p.detach().clone()) for n, p in s.model.named_parameters()}, s.worker.hot_token_id.clone()


def _unchanged(s, snap):
    params, hot = snap
    for n, p in s.model.named_parameters():
        ptr, value = params[n]
        assert p.data_ptr() == ptr and torch.equal(p.detach(), value), n
    assert torch.equal(s.worker.hot_token_id, hot)


def test_swap_loads_the_new_draft_in_place(server, drafts):
    before, hot_before = _snapshot(server)
    hot_ptr, embed = server.worker.hot_token_id.data_ptr(), server.target.embed.detach().clone()
    out = server.manager.update_weights_from_disk(_request(drafts["new"]))
    assert out.success, out.message
    assert "swapped in" in out.message and server.flushes == [{"empty_cache": False}]
    ckpt = checkpoint_tensors(drafts["new"])
    params = dict(server.model.named_parameters())
    qkv = torch.cat([ckpt[f"layers.0.self_attn.{k}_proj.weight"] for k in "qkv"])
    for name, want in {
        "model.fc.weight": ckpt["fc.weight"],
        "lm_head.weight": ckpt["lm_head.weight"],
        "model.layers.0.self_attn.qkv_proj.weight": qkv,
    }.items():
        assert params[name].data_ptr() == before[name][0], name  # the storage CUDA graphs captured
        assert torch.equal(params[name].detach(), want.to(params[name].dtype)), name
        assert not torch.equal(params[name].detach(), before[name][1]), name
    hot = ckpt["d2t"] + torch.arange(ckpt["d2t"].shape[0])
    assert server.worker.hot_token_id.data_ptr() == hot_ptr and torch.equal(server.worker.hot_token_id, hot)
    assert torch.equal(server.model.hot_token_id, hot) and not torch.equal(hot, hot_before)
    assert server.model.model.embed_tokens.weight is server.target.embed  # still the target's, untouched
    assert torch.equal(server.target.embed.detach(), embed)
    assert swap.served_draft()["path"] == str(drafts["new"]) and swap.served_draft()["swaps"] == 1


def test_embeddings_in_the_files_never_reach_the_targets(server, drafts):
    """The served draft's embeddings are the target's (set_embed): a new draft's own are not written into them."""
    embed = server.target.embed.detach().clone()
    out = server.manager.update_weights_from_disk(_request(drafts["with_embed"]))
    assert out.success, out.message
    assert server.model.model.embed_tokens.weight is server.target.embed
    assert torch.equal(server.target.embed.detach(), embed)


@pytest.mark.parametrize(
    "name,words",
    [
        ("fc_1xH", [E.FC_UNFUSED, "1x64"]),
        ("nan_weight", [E.NON_FINITE, "layers.0.mlp.down_proj.weight"]),
        ("other_layers", [E.LAYER_INDEX, "hidden_states[1, 3, 5]", "captures [2, 4, 6]"]),
        ("other_vocab", [E.SWAP_MISMATCH, "draft_vocab_size is 32", "64"]),
    ],
)
def test_bad_draft_refused_old_draft_bit_identical(server, drafts, name, words):
    snap = _snapshot(server)
    out = server.manager.update_weights_from_disk(_request(drafts[name]))
    assert not out.success
    assert "refused, the served draft is unchanged" in out.message and all(w in out.message for w in words), out.message
    _unchanged(server, snap)
    assert server.flushes == [] and swap.served_draft()["path"] == str(drafts["served"])


def test_relative_path_refused(server, drafts):
    snap = _snapshot(server)
    out = server.manager.update_weights_from_disk(_request("relative/draft"))
    assert not out.success and "absolute path" in out.message
    _unchanged(server, snap)


def test_failure_after_writing_puts_the_old_draft_back(server, drafts, monkeypatch):
    """The load wrote the new weights, then a tensor did not fit: every value and the token map go back."""
    from sglang_eagle3_ext.in_server.draft import swap_tensors

    snap = _snapshot(server)
    monkeypatch.setattr(
        swap_tensors.TensorState,
        "rebind",
        lambda self, copy=True: [] if not copy else ["Stand.in became [1], served [64]"],
    )
    out = server.manager.update_weights_from_disk(_request(drafts["new"]))
    assert not out.success and "the served draft is put back" in out.message and "Stand.in" in out.message
    _unchanged(server, snap)


def test_another_rank_refusing_undoes_this_ranks_swap(server, drafts, monkeypatch):
    from sglang_eagle3_ext.in_server.draft import swap_tensors

    snap = _snapshot(server)
    monkeypatch.setattr(swap_tensors, "agree", lambda group, ok, msg: (False, "TP rank 1: draft refused: [x] bad"))
    out = server.manager.update_weights_from_disk(_request(drafts["new"]))
    assert not out.success and out.message.startswith("TP rank 1:")
    _unchanged(server, snap)


def test_other_updates_stay_sglangs(server, drafts):
    """Any other load_format is SGLang's own reload (here its target worker's answer comes back)."""
    calls = []
    server.manager.tp_worker.update_weights_from_disk = lambda req: calls.append(req) or (False, "target says no")
    snap = _snapshot(server)
    out = server.manager.update_weights_from_disk(_request(drafts["new"], load_format="auto"))
    assert calls and not out.success and out.message == "target says no"
    _unchanged(server, snap)


def test_state_report_is_what_the_client_reads(server, drafts):
    from sglang.srt.managers.io_struct import GetInternalStateReqOutput

    from sglang_eagle3_ext.draft.swap.client import draft_states

    reply = GetInternalStateReqOutput(internal_state={"avg_spec_accept_length": 2.0})
    swap.add_state_report(types.SimpleNamespace(weight_updater=server.manager), reply)
    info = json.loads(json.dumps({"internal_states": [reply.internal_state]}))  # as /get_server_info sends it
    (state,) = draft_states(info, "GET /get_server_info")
    assert state["draft"] == str(drafts["served"]) and state["hf_indices"] == list(AUX)
    assert state["target_layers"] == 8 and state["token_map"] is True
    assert state["spec"]["k"] == 3 and state["spec"]["draft_vocab"] == 64


def test_served_model_keeps_its_name(ext):
    """After a draft swap the tokenizer manager keeps the served model's name and path; other updates rename."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    tm = TokenizerManager.__new__(TokenizerManager)
    tm.served_model_name = tm.model_path = "target"
    tm.server_args = types.SimpleNamespace(override=lambda *a, **kw: None)
    tm._update_model_path_info("/drafts/new", swap.LOAD_FORMAT)
    assert tm.served_model_name == tm.model_path == "target"
    tm._update_model_path_info("/models/other", "auto")
    assert tm.served_model_name == "/models/other"


def test_sglangs_record_names_the_swapped_draft(ext, drafts, monkeypatch):
    """After a draft swap the tokenizer manager's ServerArgs (what /get_server_info sends, what `eval --url` and a
    relaunch from the reported arguments read) name the new draft, through ServerArgs.override where the release
    has it (under its strict mode a bare assignment raises); the served model keeps its path."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    target, served, new = (str(drafts[k]) for k in ("target", "served", "new"))
    sa = ext.server_args(target, speculative_draft_model_path=served)
    tm = TokenizerManager.__new__(TokenizerManager)
    tm.served_model_name = tm.model_path = target
    tm.server_args = sa
    monkeypatch.setenv("SGLANG_STRICT_CONFIG_MUTATION", "1")
    tm._update_model_path_info(new, swap.LOAD_FORMAT)
    reported = dataclasses.asdict(sa) if dataclasses.is_dataclass(sa) else {f: getattr(sa, f) for f in dir(sa)}
    assert reported["speculative_draft_model_path"] == new
    assert reported["model_path"] == target and tm.served_model_name == tm.model_path == target


def test_mla_draft_swaps_in_place_with_its_absorbed_kv(ext, drafts, tmp_path, monkeypatch):
    """Kimi-K2.5's MLA draft: post_load_weights rebinds w_kc / w_vc; the served tensors take the new values."""
    from sglang_eagle3_ext.draft.arch import mla
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    if not ext.caps.HAS_MLA_DRAFT:
        pytest.skip(f"SGLang {ext.version} has no {mla.ARCH}")
    monkeypatch.setattr(swap, "_served", {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)  # its set_embed syncs the device
    served, new = (make_mla_draft(tmp_path / n, aux_ids=AUX, seed=i) for i, n in enumerate(("served", "new")))
    target = stub_deepseek_target(8)
    target.model.layers_to_capture = list(AUX)
    s = _scheduler(load_draft(ext, served, drafts["target"], mla.ARCH), target)
    attn = s.model.model.midlayer.self_attn
    kept = {n: (getattr(attn, n).data_ptr(), getattr(attn, n).clone()) for n in ("w_kc", "w_vc")}
    with serving(ext, drafts["target"], served):
        out = s.manager.update_weights_from_disk(_request(new))
    assert out.success, out.message
    kv_b = checkpoint_tensors(new)["layers.0.self_attn.kv_b_proj.weight"].unflatten(
        0, (s.model.config.num_attention_heads, -1)
    )
    for name, (ptr, old) in kept.items():
        t = getattr(attn, name)
        assert t.data_ptr() == ptr and not torch.equal(t, old), name
    torch.testing.assert_close(attn.w_kc.float(), kv_b[:, : attn.qk_nope_head_dim].float(), rtol=0, atol=0)


def _refused_everywhere(server, drafts, words: str) -> None:
    """The swap and the state report the client reads both say `words`; the served draft is bit-identical."""
    from sglang.srt.managers.io_struct import GetInternalStateReqOutput

    snap = _snapshot(server)
    out = server.manager.update_weights_from_disk(_request(drafts["new"]))
    assert not out.success and words in out.message and "restart the server" in out.message, out.message
    _unchanged(server, snap)
    reply = GetInternalStateReqOutput(internal_state={})
    swap.add_state_report(types.SimpleNamespace(weight_updater=server.manager), reply)
    assert words in reply.internal_state[swap.STATE_KEY]["refusal"]


def test_a_quantized_draft_is_refused_before_anything_is_written(server, drafts):
    """--quantization fp8 repacks the draft's linear weights after loading (new parameters, no weight loaders):
    a second load in place cannot work, so the server says so instead of failing half-way."""
    fp8 = pytest.importorskip("sglang.srt.layers.quantization.fp8")
    layer = (
        server.model.model.midlayer.self_attn.qkv_proj
        if hasattr(server.model.model, "midlayer")
        else server.model.model.layers[0].self_attn.qkv_proj
    )
    layer.quant_method = fp8.Fp8LinearMethod.__new__(fp8.Fp8LinearMethod)  # start-up's, on a GPU
    _refused_everywhere(server, drafts, "Fp8LinearMethod")


def test_dp_local_control_broadcast_is_refused(ext, server, drafts):
    """With that flag each DP group takes control requests in its own scheduler iteration: the TP ranks cannot
    agree in step, so the swap is refused before anything is written."""
    try:
        sa = ext.server_args(
            str(drafts["target"]),
            speculative_draft_model_path=str(drafts["served"]),
            enable_dp_attention_local_control_broadcast=True,
        )
    except TypeError:
        pytest.skip("this release has no --enable-dp-attention-local-control-broadcast")
    ext.publish(sa)
    _refused_everywhere(server, drafts, "--enable-dp-attention-local-control-broadcast")


# ---- a draft that SGLang would build otherwise: refused by name, restart to serve it --------------------------

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _built(ext, target, d, arch) -> dict:
    """What the release builds from draft `d`'s config, weights aside: every submodule's plain attributes and
    buffers (the rotary's style, dims and cos/sin table among them)."""
    from helpers import build_draft

    with serving(ext, target, d):
        model = build_draft(d, arch)
    out = {}
    for name, mod in model.named_modules():
        for attr, v in vars(mod).items():
            if not attr.startswith("_") and (v is None or isinstance(v, (bool, int, float, str))):
                out[f"{name}.{attr}"] = v
        for attr, b in mod.named_buffers(recurse=False):
            out[f"{name}.{attr}"] = (tuple(b.shape), b.float().sum().item())
    return out


def _differs(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


@pytest.fixture
def serve(ext, drafts, monkeypatch):
    """serve(draft_dir): a scheduler serving that draft (the `server` fixture for any served draft)."""
    import contextlib

    stack = contextlib.ExitStack()

    def start(served, arch=LLAMA):
        monkeypatch.setattr(swap, "_served", {})
        target = stub_deepseek_target(8)
        target.model.layers_to_capture = list(AUX)
        s = _scheduler(load_draft(ext, served, drafts["target"], arch), target)
        stack.enter_context(serving(ext, drafts["target"], served))
        return s

    with stack:
        yield start


@pytest.mark.parametrize(
    "base,change",
    [
        ({}, {"rope_is_neox_style": False}),
        ({}, {"partial_rotary_factor": 0.5}),
        ({"rope_parameters": LLAMA3_ROPE}, {"original_max_position_embeddings": 2048}),
        ({}, {"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}),
    ],
    ids=["rope_is_neox_style", "partial_rotary_factor", "original_max_position_embeddings", "rope_parameters"],
)
def test_a_draft_built_otherwise_is_refused_naming_the_key(ext, drafts, serve, tmp_path, base, change):
    """The draft differs from the served one only in a config key SGLang's constructors read: a restart with it
    builds another draft (its rotary differs), so a swap, which only loads weights, refuses it by name."""
    served = edited_draft(drafts["served"], tmp_path / "served", **base) if base else drafts["served"]
    new = edited_draft(drafts["new"], tmp_path / "new", **base, **change)
    (key,) = change
    assert _differs(_built(ext, drafts["target"], served, LLAMA), _built(ext, drafts["target"], new, LLAMA)), (
        f"{key} does not change what SGLang builds"
    )
    s = serve(served)
    snap = _snapshot(s)
    out = s.manager.update_weights_from_disk(_request(new))
    assert not out.success, out.message
    assert f"config {key} is" in out.message and "restart to serve it" in out.message, out.message
    _unchanged(s, snap)
    assert swap.served_draft()["path"] == str(served)


def test_a_draft_differing_in_what_sglang_does_not_build_from_swaps(ext, drafts, serve, tmp_path):
    """Keys no constructor reads (here the training's initializer_range and a comment) do not block a swap."""
    new = edited_draft(drafts["new"], tmp_path / "new", initializer_range=0.5, note="retrained on week 12")
    s = serve(drafts["served"])
    out = s.manager.update_weights_from_disk(_request(new))
    assert out.success, out.message


def test_mla_draft_with_another_rope_interleave_is_refused(ext, drafts, serve, tmp_path, monkeypatch):
    """Kimi-K2.5's MLA draft reads rope_interleave into its rotary (deepseek_v2's attention): not swappable."""
    from sglang_eagle3_ext.draft.arch import mla
    from sglang_eagle3_ext.tiny.mla_draft import make_mla_draft

    if not ext.caps.HAS_MLA_DRAFT:
        pytest.skip(f"SGLang {ext.version} has no {mla.ARCH}")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)  # its set_embed syncs the device
    served = make_mla_draft(tmp_path / "served", aux_ids=AUX, seed=0)
    new = edited_draft(
        make_mla_draft(tmp_path / "new_src", aux_ids=AUX, seed=1), tmp_path / "new", rope_interleave=False
    )
    assert _differs(_built(ext, drafts["target"], served, mla.ARCH), _built(ext, drafts["target"], new, mla.ARCH))
    s = serve(served, mla.ARCH)
    attn = s.model.model.midlayer.self_attn
    kept = attn.w_kc.clone()
    out = s.manager.update_weights_from_disk(_request(new))
    assert not out.success and "config rope_interleave is False" in out.message, out.message
    assert "restart to serve it" in out.message and torch.equal(attn.w_kc, kept)


def test_the_compared_keys_come_from_the_release_source(ext):
    """The keys are read off the installed release's draft classes (not only a fixed list): those the issue's
    review found, and the server reports the list the client compares."""
    from sglang_eagle3_ext.draft.arch import llama, mla
    from sglang_eagle3_ext.draft.swap.keys import build_keys, config_reads, sglang_root

    found = config_reads(sglang_root(), llama.SGLANG_CLASS)
    assert {
        "rope_is_neox_style",
        "partial_rotary_factor",
        "original_max_position_embeddings",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "max_position_embeddings",
        "rms_norm_eps",
        "hidden_act",
    } <= found
    assert "rope_interleave" not in found  # deepseek's, not Llama's
    assert "rope_is_neox_style" in build_keys(llama) and "hidden_size" not in build_keys(llama)  # the spec's
    if ext.caps.HAS_MLA_DRAFT:
        assert {"rope_interleave", "rope_scaling", "rms_norm_eps"} <= config_reads(sglang_root(), mla.SGLANG_CLASS)


def test_the_state_report_names_the_compared_keys(server, drafts):
    from sglang.srt.managers.io_struct import GetInternalStateReqOutput

    from sglang_eagle3_ext.draft.swap.client import draft_states

    reply = GetInternalStateReqOutput(internal_state={})
    swap.add_state_report(types.SimpleNamespace(weight_updater=server.manager), reply)
    (state,) = draft_states(json.loads(json.dumps({"internal_states": [reply.internal_state]})), "GET i")
    assert "rope_is_neox_style" in state["build_keys"] and "rope_is_neox_style" not in state["build"]
    assert state["build"]["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"}
