"""Dump while serving EAGLE-3 against real SGLang objects on CPU: a real ForwardBatch in EXTEND and
TARGET_VERIFY mode through the patch-table LogitsProcessor wrapper, real Req / ScheduleBatch /
EagleVerifyInput / LogitsProcessorOutput / GenerationBatchResult through the EAGLEWorkerV2.verify and
SchedulerOutputStreamer.stream_output wrappers. Only the target's forward itself is a stand-in (random states
of the right shapes, the real RMSNorm), and the verify's sampling (its accept lengths are the test's input)."""

from __future__ import annotations

import json
import types

import pytest
import torch
from test_dump_hook import _original_forward

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.loss_mask import default_loss_mask
from sglang_eagle3_ext.dump.manifest import read_manifest
from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_POST, T_PRE, read_sample
from sglang_eagle3_ext.in_server.dump import serving_mode, start, verify_capture
from sglang_eagle3_ext.in_server.hooks.eagle_worker_v2 import dump_verify
from sglang_eagle3_ext.in_server.hooks.logits_processor import dump_prefill
from sglang_eagle3_ext.in_server.hooks.output_streamer import dump_request_end
from sglang_eagle3_ext.server.startup import startup_context

pytestmark = pytest.mark.sglang
H, N = 16, 6
DRAFT_LAYERS = [1, 3, 5]
NDT = 4  # draft tokens per request in a verify (topk 1: num_steps + 1)


@pytest.fixture
def serving(sglang_cpu, tmp_path, monkeypatch):
    """A dump target attached as under `--speculative-algorithm EAGLE3` with a draft whose config records
    HF indices DRAFT_LAYERS; returns a builder taking extra env (the dump's own variables)."""
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "eagle_config": {
                    "eagle_aux_hidden_state_layer_ids": [0, 2, 4],
                    "hf_hidden_state_indices": DRAFT_LAYERS,
                },
            }
        )
    )
    sa = types.SimpleNamespace(
        speculative_algorithm="EAGLE3",
        speculative_eagle_topk=1,
        speculative_draft_model_path=str(draft),
        disable_radix_cache=True,
        model_path=None,
        served_model_name=None,
        chunked_prefill_size=None,
        dtype="float32",
    )
    monkeypatch.setattr("sglang_eagle3_ext.server.runtime.server_args", lambda: sa)
    monkeypatch.setattr("sglang_eagle3_ext.in_server.dump.prefill_graphs.check", lambda sa: None)
    start.reset()
    dump = tmp_path / "dump"
    dump.mkdir()

    def make(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        cfg = C.from_env(
            {
                envs.DUMP_DIR: str(dump),
                C.ENV_FINAL: "both",
                C.ENV_MIN_TOKENS: "1",
                **{k: v for k, v in env.items() if k.startswith("SGLANG_EAGLE3_EXT_DUMP_") and k in C.ALL_ENV},
            }
        )
        m = _model()
        target = start.attach(m, cfg)
        return types.SimpleNamespace(model=m, target=target, writer=start.get_writer(), dir=dump, sa=sa)

    yield make
    w = start.get_writer()
    if w is not None:
        w.close()


def _model():
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.logits_processor import LogitsProcessor
    from transformers import PretrainedConfig

    cfg = PretrainedConfig(hidden_size=H, num_hidden_layers=N, vocab_size=256, architectures=["DeepseekV3ForCausalLM"])
    inner = torch.nn.Module()
    inner.norm = RMSNorm(H, eps=1e-6)
    inner.norm.weight.data = torch.rand(H) + 0.5
    inner.layers_to_capture = []
    m = type("DeepseekV3ForCausalLM", (torch.nn.Module,), {})()  # attach() accepts the targets' class names
    m.config, m.model, m.capture_aux_hidden_states = cfg, inner, False
    m.logits_processor = LogitsProcessor(cfg)
    return m


def _fb(mode, rids, prefix, ext, ids):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    bs = len(rids)
    return ForwardBatch(
        forward_mode=mode,
        batch_size=bs,
        input_ids=ids,
        req_pool_indices=torch.arange(bs),
        seq_lens=torch.tensor([p + e for p, e in zip(prefix, ext)]),
        out_cache_loc=torch.arange(len(ids)),
        seq_lens_sum=sum(p + e for p, e in zip(prefix, ext)),
        orig_seq_lens=torch.tensor([p + e for p, e in zip(prefix, ext)], dtype=torch.int32),
        rids=list(rids),
        extend_prefix_lens_cpu=list(prefix),
        extend_seq_lens_cpu=list(ext),
    )


def _target_forward(m, fb, T):
    """What DeepseekV2ForCausalLM.forward hands LogitsProcessor.forward (through our wrapper): the real final
    norm runs (its hook stashes the pre-norm state). Returns {aux [T, K*H], pre, post}."""
    x, residual = torch.randn(T, H), torch.randn(T, H)
    post, _ = m.model.norm(x.clone(), residual.clone())
    aux = [torch.randn(T, H) for _ in DRAFT_LAYERS]
    dump_prefill(_original_forward(m.logits_processor), m.logits_processor, (None, post, None, fb, aux), {})
    return {"aux": torch.cat(aux, -1), "pre": x + residual, "post": post}


def _req(rid, prompt):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    return Req(rid, "", list(prompt), SamplingParams(max_new_tokens=64))


class Seq:
    """One request's true token sequence (prompt + everything the target will output)."""

    def __init__(self, req, n_out, seed):
        g = torch.Generator().manual_seed(seed)
        self.req, self.P = req, len(req.origin_input_ids)
        self.tokens = list(req.origin_input_ids) + torch.randint(100, 200, (n_out,), generator=g).tolist()
        self.pos = self.P  # next position whose state the target computes


def _verify(m, reqs_seqs, accepts, *, eager=True, static_fill=None):
    """One EAGLEWorkerV2.verify through our wrapper. Row j of request i is the token at position pos + j (row 0:
    the previous bonus token, then drafts; the drafts after the accepted ones are wrong guesses, 0..9). The
    stand-in for SGLang's verify runs the target forward (TARGET_VERIFY) and returns the real result type."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    bs = len(reqs_seqs)
    ids, pos = [], []
    for s, a in zip(reqs_seqs, accepts):
        ids += s.tokens[s.pos : s.pos + a] + list(range(NDT - a))
        pos += list(range(s.pos, s.pos + NDT))
    vi = EagleVerifyInput(
        draft_token=torch.tensor(ids),
        custom_mask=None,
        positions=torch.tensor(pos),
        retrieve_index=None,
        retrieve_next_token=None,
        retrieve_next_sibling=None,
        retrieve_cum_len=None,
        spec_steps=NDT - 1,
        topk=1,
        draft_token_num=NDT,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        seq_lens_sum=0,
        seq_lens_cpu=None,
    )
    batch = ScheduleBatch(reqs=[s.req for s in reqs_seqs], forward_mode=ForwardMode.DECODE, spec_info=vi)
    seen = {}

    def sglang_verify(batch, expected=batch):  # EAGLEWorkerV2.verify(batch): the hook binds it by name
        assert batch is expected
        fb = _fb(ForwardMode.TARGET_VERIFY, [s.req.rid for s in reqs_seqs], [0] * bs, [NDT] * bs, vi.draft_token)
        if eager:
            seen.update(_target_forward(m, fb, bs * NDT))
        else:  # a CUDA-graph replay: no Python hook runs; the graph's recorded copy refreshed the static buffer
            seen.update(static_fill(bs * NDT))
        lo = LogitsProcessorOutput(next_token_logits=None, hidden_states=seen["aux"])
        return GenerationBatchResult(
            logits_output=lo, accept_lens=torch.tensor(accepts, dtype=torch.int32), can_run_cuda_graph=not eager
        )

    dump_verify(sglang_verify, types.SimpleNamespace(topk=1), (batch,), {})
    rows = {}
    for i, (s, a) in enumerate(zip(reqs_seqs, accepts)):
        rows[s.req.rid] = {k: v[i * NDT : i * NDT + a] for k, v in seen.items()}
        s.pos += a
    return rows


def _end(reqs_seqs, kinds):
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH

    for s, kind in zip(reqs_seqs, kinds):
        s.req.output_ids = s.tokens[s.P : s.pos + 1]  # + the last bonus token, whose state nobody computed
        s.req.finished_reason = FINISH_ABORT() if kind == "abort" else FINISH_LENGTH(len(s.req.output_ids))

    def stream_output(reqs, return_logprob):  # SchedulerOutputStreamer.stream_output: the hook binds reqs by name
        return None

    dump_request_end(stream_output, types.SimpleNamespace(), ([s.req for s in reqs_seqs], False), {})


def _prefill(m, seqs):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    ids = torch.tensor([t for s in seqs for t in s.tokens[: s.P]])
    fb = _fb(ForwardMode.EXTEND, [s.req.rid for s in seqs], [0] * len(seqs), [s.P for s in seqs], ids)
    st = _target_forward(m, fb, len(ids))
    out, r = {}, 0
    for s in seqs:
        out[s.req.rid] = {k: v[r : r + s.P] for k, v in st.items()}
        r += s.P
    return out


def _check_sample(d, rid, parts, tokens):
    man = read_manifest(d)
    t, meta = read_sample(d / man[rid]["file"])
    assert t[T_IDS].tolist() == tokens
    for key, name in ((T_AUX, "aux"), (T_PRE, "pre"), (T_POST, "post")):
        assert torch.equal(t[key], torch.cat([p[name] for p in parts])), key
    return man[rid], meta


def test_prompt_plus_accepted_rows_and_bonus_stitched_per_request(serving):
    """Two requests prefilled together; verifies with per-request accept lengths (a subset of the batch: a
    nodump- request sits between them); one finishes, one is aborted; a verify after the finish (overlap
    scheduling) adds nothing. The finished sample is prompt + exactly the accepted/bonus rows, in order."""
    sv = serving()
    assert sv.model.model.layers_to_capture == DRAFT_LAYERS  # the draft's layers, no variable set
    w = sv.writer
    a = Seq(_req("a", range(1, 6)), 12, 1)
    b = Seq(_req("b", range(20, 24)), 12, 2)
    x = Seq(_req("nodump-x", range(40, 43)), 12, 3)
    pre = _prefill(sv.model, [a, b, x])
    v1 = _verify(sv.model, [a, x, b], [3, 2, 1])  # index_select path (x is not dumped)
    v2 = _verify(sv.model, [a, b], [4, 2])  # every request dumped: the slice path
    _end([a, b], ["finished", "abort"])
    _verify(sv.model, [a], [2])  # overlap tail: a verify after the end
    assert w.flush(30)
    rec, meta = _check_sample(sv.dir, "a", [pre["a"], v1["a"], v2["a"]], a.tokens[: 5 + 7])
    assert set(read_manifest(sv.dir)) == {"a"}  # aborted: nothing written
    assert (rec["prompt_len"], rec["prefill_tokens"], rec["verify_tokens"]) == (5, 5, 7)
    assert meta["verify_tokens"] == 7 and meta["accept_len"] == pytest.approx(3.5)
    assert default_loss_mask(rec, 12) == [0] * 5 + [1] * 7
    from sglang_eagle3_ext.dump.exporters.specforge import export_specforge

    assert export_specforge(sv.dir, sv.dir.parent / "sf") == 1  # the export trains on the response only
    row = torch.load(next((sv.dir.parent / "sf").rglob("data_0.ckpt")), weights_only=True)
    assert row["loss_mask"].tolist() == [0] * 5 + [1] * 7 and row["input_ids"].tolist() == a.tokens[:12]
    st = w.stats
    assert (st["response_samples"], st["response_tokens"], st["dropped_aborted"], st["held_requests"]) == (1, 7, 1, 0)
    assert st["verify_batches"] == 3 and st["held_mb"] == 0
    assert w.budget.used == 0  # every batch's host memory went back


def test_prompt_only_request_and_request_ended_mid_prefill(serving):
    """A request that ends right after its prefill is written as its prompt (no verify tokens, full mask);
    a chunked prompt aborted before its last chunk leaves nothing held."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    sv = serving()
    a = Seq(_req("a", range(1, 7)), 4, 1)
    _prefill(sv.model, [a])
    c = Seq(_req("c", range(50, 60)), 4, 2)
    fb = _fb(ForwardMode.EXTEND, ["c"], [0], [4], torch.tensor(c.tokens[:4]))
    fb.orig_seq_lens = torch.tensor([10], dtype=torch.int32)  # 4 of 10 prompt tokens: a first chunk
    _target_forward(sv.model, fb, 4)
    _end([a, c], ["finished", "abort"])
    assert sv.writer.flush(30)
    man = read_manifest(sv.dir)
    assert set(man) == {"a"} and man["a"]["verify_tokens"] == 0 and man["a"]["num_tokens"] == 6
    assert default_loss_mask(man["a"], 6) == [1] * 6
    assert sv.writer._asm.partials == {} and sv.writer.budget.used == 0


def test_wrong_token_or_gap_refuses_the_request(serving):
    """The stitched ids must be the request's own, and each verify chunk must start where the last ended."""
    sv = serving()
    a = Seq(_req("a", range(1, 6)), 12, 1)
    b = Seq(_req("b", range(20, 26)), 12, 2)
    _prefill(sv.model, [a, b])
    _verify(sv.model, [a, b], [2, 2])
    b.pos += 1  # a verify went missing for b: a gap
    _verify(sv.model, [a, b], [2, 2])
    a.tokens[a.P + 1] = 7  # the request's output differs from what was stitched
    _end([a, b], ["finished", "finished"])
    assert sv.writer.flush(30)
    assert read_manifest(sv.dir) == {}
    st = sv.writer.stats
    assert st["refused_token_mismatch"] == 1 and st["refused_verify_gap"] == 1 and st["held_requests"] == 0
    # refusals made after the end (the stitch's) do not outlive the request: a re-sent rid is dumped again
    from sglang_eagle3_ext.in_server.dump.verify_capture import get_active

    assert not ({"a", "b"} & get_active().refused)


def test_cuda_graph_path_reads_the_static_buffer(serving, monkeypatch):
    """Under CUDA graphs the LogitsProcessor hook runs only while a graph is captured: it records a copy into a
    buffer sized by the eager warm-up that precedes every capture. A replayed verify (no hook call) is read
    from that buffer; a capture larger than the warm-up turns response capture off, loudly."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    sv = serving()
    vc = verify_capture.get_active()
    monkeypatch.setattr(verify_capture, "_graphs_possible", lambda t: True)
    warm = _fb(ForwardMode.TARGET_VERIFY, ["w"] * 4, [0] * 4, [NDT] * 4, torch.zeros(4 * NDT, dtype=torch.long))
    _target_forward(sv.model, warm, 4 * NDT)  # warm-up of the largest graph: allocates
    assert tuple(vc.static.shape) == (2, 4 * NDT, H)
    monkeypatch.setattr(verify_capture, "_capturing", lambda t: True)
    cap = _target_forward(
        sv.model,
        _fb(ForwardMode.TARGET_VERIFY, ["w"] * 2, [0] * 2, [NDT] * 2, torch.zeros(2 * NDT, dtype=torch.long)),
        2 * NDT,
    )
    assert torch.equal(vc.static[0, : 2 * NDT], cap["pre"]) and vc.graph_rows == 2 * NDT
    monkeypatch.setattr(verify_capture, "_capturing", lambda t: False)
    a = Seq(_req("a", range(1, 6)), 8, 1)
    pre = _prefill(sv.model, [a])

    def replay(T):  # what the graph's recorded copies leave behind
        st = {"aux": torch.randn(T, 3 * H), "pre": torch.randn(T, H), "post": torch.randn(T, H)}
        vc.static[0, :T], vc.static[1, :T] = st["pre"], st["post"]
        return st

    v = _verify(sv.model, [a], [3], eager=False, static_fill=replay)
    _end([a], ["finished"])
    assert sv.writer.flush(30)
    _check_sample(sv.dir, "a", [pre["a"], v["a"]], a.tokens[:8])
    monkeypatch.setattr(verify_capture, "_capturing", lambda t: True)
    _target_forward(
        sv.model,
        _fb(ForwardMode.TARGET_VERIFY, ["w"] * 8, [0] * 8, [NDT] * 8, torch.zeros(8 * NDT, dtype=torch.long)),
        8 * NDT,
    )
    assert vc.disabled and "warm-up" in vc.disabled


def test_sample_rate_and_accept_length_threshold(serving):
    """Sampling is a stable hash of the id (the capture copies nothing for requests outside it); the threshold
    keeps only requests whose own accept length is below it."""
    rate_ids = [f"r{i}" for i in range(2000)]
    frac = sum(C.sampled(i, 0.25) for i in rate_ids) / len(rate_ids)
    assert 0.2 < frac < 0.3 and C.sampled("r1", 0.25) == C.sampled("r1", 0.25)
    sv = serving(SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE="0.5", SGLANG_EAGLE3_EXT_DUMP_MAX_ACCEPT_LEN="2.5")
    ids = [f"q{i}" for i in range(40)]
    inside = [i for i in ids if C.sampled(i, 0.5)]
    outside = [i for i in ids if i not in inside]
    fast, slow, out = (
        Seq(_req(inside[0], range(1, 6)), 12, 1),
        Seq(_req(inside[1], range(1, 6)), 12, 2),
        Seq(_req(outside[0], range(1, 6)), 12, 3),
    )
    _prefill(sv.model, [fast, slow, out])
    assert (
        sv.writer.flush(30)
        and sv.writer._asm.partials == {}
        and set(sv.writer._asm.held) == {fast.req.rid, slow.req.rid}
    )
    _verify(sv.model, [fast, slow, out], [4, 2, 3])
    _verify(sv.model, [fast, slow, out], [3, 2, 3])
    _end([fast, slow, out], ["finished"] * 3)
    assert sv.writer.flush(30)
    assert set(read_manifest(sv.dir)) == {slow.req.rid}  # accept 2.0 < 2.5; 3.5 is not
    st = sv.writer.stats
    assert st["skipped_accept_len"] == 1 and st["skipped_not_sampled"] == 1


def test_layers_are_the_drafts_or_a_start_up_error(serving, monkeypatch):
    from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError

    with pytest.raises(C.DumpConfigError, match=r"DUMP_LAYERS=1,2,3 .*\[1, 3, 5\]"):
        serving(SGLANG_EAGLE3_EXT_DUMP_LAYERS="1,2,3")
    sv = serving(SGLANG_EAGLE3_EXT_DUMP_LAYERS="1,3,5")  # the same layers: fine
    serving_mode.check_worker(types.SimpleNamespace(topk=1))
    sv.model.model.layers_to_capture = [2, 3, 5]  # SGLang set other layers for the draft
    with pytest.raises(DumpStartupError, match=r"\[2, 3, 5\].*\[1, 3, 5\]"):
        serving_mode.check_worker(types.SimpleNamespace(topk=1))
    sv.sa.speculative_eagle_topk = 4
    with pytest.raises(C.DumpConfigError, match="topk"):
        serving_mode.install(sv.target, sv.model, startup_context())  # the same ServerArgs: the same context


def test_retracted_request_restitched_and_end_streamed_twice(serving):
    """A request retracted mid-decode is re-prefilled with its output so far: the new prefill replaces what was
    held, verify rows continue after it; the loss mask still starts after the request's own prompt. Under
    overlap scheduling a finished request is streamed again in the next batch: written once."""
    sv = serving()
    a = Seq(_req("a", range(1, 6)), 12, 1)
    _prefill(sv.model, [a])
    _verify(sv.model, [a], [3])
    # retraction: SGLang re-prefills prompt + output so far (8 tokens) from scratch
    redo = Seq(_req("a", a.tokens[:8]), 0, 9)
    redo.tokens = a.tokens
    re = _prefill(sv.model, [redo])
    a.pos = 8
    v = _verify(sv.model, [a], [2])
    _end([a], ["finished"])
    _end([a], ["finished"])
    assert sv.writer.flush(30)
    rec, meta = _check_sample(sv.dir, "a", [re["a"], v["a"]], a.tokens[:10])
    assert (rec["prompt_len"], rec["prefill_tokens"], rec["verify_tokens"]) == (5, 8, 2)
    assert default_loss_mask(rec, 10) == [0] * 5 + [1] * 5
    assert sv.writer.stats["written"] == 1 and sv.writer.stats["held_requests"] == 0
