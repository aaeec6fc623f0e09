"""`eval`'s two accept lengths against the code SGLang computes them with: a greedy server's verify rounds are
settled by SGLang's own result processor (SchedulerBatchResultProcessor._resolve_spec_v2_tokens: the per-request
counters and histogram), counted by its metrics reporter (SchedulerMetricsReporter.update_spec_metrics: what
avg_spec_accept_length, the log's accept len and the sglang:spec_accept_length metric divide) and turned into a
reply's meta_info by its tokenizer manager (TokenizerManager._calculate_spec_decoding_metrics). Only the objects
those methods read are stand-ins; the arithmetic is SGLang's.

- eval's headline (prediction and served reading) is the reporter's figure; its per-request figure is the
  reply's spec_accept_length.
- A perfect draft at 3 steps: SGLang reports 4.00 for 10 and for 33 generated tokens; per request 3.33 and
  4.125.
"""

from __future__ import annotations

import types

import pytest
import torch

pytestmark = pytest.mark.sglang
STEPS = 3


def _sglang():
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
    from sglang.srt.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    return Req, SchedulerBatchResultProcessor, SchedulerMetricsReporter, TokenizerManager


def _request(Req):
    req = types.SimpleNamespace(
        is_retracted=False,
        grammar=None,
        kv_committed_len=0,
        spec_verify_ct=0,
        spec_num_correct_drafts=0,
        spec_correct_drafts_histogram=[],
        done=False,
    )
    req.finished = lambda: req.done
    req.update_spec_correct_drafts_histogram = types.MethodType(Req.update_spec_correct_drafts_histogram, req)
    return req


def serve(new_tokens: int, accept_lens, overlap: bool = True) -> tuple[float, dict]:
    """One request of `new_tokens` greedy tokens on a server whose verify round k accepts accept_lens[k] tokens
    (drafts + bonus, as the worker returns them, never cut at max_new_tokens). Returns (the figure SGLang's
    reporter gives, the reply's meta_info). With `overlap`, the round an overlap scheduler launched before it saw
    the request finish is counted as the scheduler counts it."""
    Req, Processor, Reporter, Tokenizer = _sglang()
    proc = types.SimpleNamespace(model_worker=types.SimpleNamespace(on_verify_complete_cpu=lambda *a, **k: None))
    reporter = types.SimpleNamespace(
        spec_num_accept_tokens=0,
        spec_num_forward_ct=0,
        spec_num_block_accept_tokens=0,
        spec_num_cap_tokens=0,
        num_generated_tokens=0,
    )
    req, out, rounds = _request(Req), 1, iter(accept_lens)  # the prefill's token
    while not req.done or overlap:
        n = next(rounds)
        result = types.SimpleNamespace(
            next_token_ids=torch.arange(STEPS + 1),
            accept_lens=torch.tensor([n]),
            block_accept_lens=None,
            cap_lens=None,
            speculative_num_draft_tokens=STEPS + 1,
        )
        batch = types.SimpleNamespace(reqs=[req])
        Processor._resolve_spec_v2_tokens(proc, result, batch)
        Reporter.update_spec_metrics(reporter, 1, result.num_correct_drafts)
        if req.done:
            break  # the overlap round after the finish
        out += n
        req.done = out >= new_tokens
    recv = types.SimpleNamespace(
        spec_verify_ct=[req.spec_verify_ct],
        spec_num_correct_drafts=[req.spec_num_correct_drafts],
        completion_tokens=[new_tokens],
        spec_correct_drafts_histogram=[req.spec_correct_drafts_histogram],
    )
    tm = types.SimpleNamespace(server_args=types.SimpleNamespace(speculative_num_draft_tokens=STEPS + 1))
    meta = {"completion_tokens": new_tokens}
    Tokenizer._calculate_spec_decoding_metrics(tm, meta, recv, 0)
    return reporter.spec_num_accept_tokens / reporter.spec_num_forward_ct, meta


def _eval_walk(new_tokens: int, accepted_at):
    """eval's walk over one response of `new_tokens` tokens, the draft accepting accepted_at(anchor) tokens of
    those the response holds after the anchor."""
    from sglang_eagle3_ext.acceptance.stats import Walk

    prompt = 4
    L = prompt + new_tokens
    mask = [0] * prompt + [1] * new_tokens
    known = [max(0, min(STEPS, L - 1 - (c + 1))) if c + 1 >= prompt else 0 for c in range(L)]
    accepted = [min(k, accepted_at(c + 1)) for c, k in enumerate(known)]
    w = Walk(STEPS)
    w.add(accepted, known, mask)
    return w


@pytest.mark.parametrize("new_tokens, per_request", [(10, 10 / 3), (33, 33 / 8)])
def test_a_perfect_draft_reads_as_sglang_reports_it(new_tokens, per_request):
    figure, meta = serve(new_tokens, [STEPS + 1] * 64)
    assert figure == 4.0 and meta["spec_accept_length"] == pytest.approx(per_request)
    w = _eval_walk(new_tokens, lambda a: STEPS)
    assert w.as_sglang_reports() == figure
    assert w.per_request() == pytest.approx(meta["spec_accept_length"])


def test_the_served_reading_is_the_reporters_figure():
    """Replies built by SGLang's tokenizer manager, read as eval --url reads them (bench's RunStats, the
    histogram): 1 + correct drafts / rounds, the reporter's figure over the same rounds (no overlap round)."""
    from sglang_eagle3_ext.acceptance.stats import histogram_accept_length, served_positions
    from sglang_eagle3_ext.bench.stats import RunStats
    from sglang_eagle3_ext.server.replies import generate_reply

    pattern = [4, 1, 2, 3, 1, 1, 4, 2, 3, 4, 1, 2]
    st, figures = RunStats("spec", 1), []
    for n in (9, 17, 30):
        figure, meta = serve(n, pattern * 8, overlap=False)
        figures.append(figure)
        st.add(generate_reply({"output_ids": list(range(n)), "meta_info": meta}, "test"), 0.0)
        assert histogram_accept_length(meta["spec_correct_drafts_histogram"]) == pytest.approx(figure)
        assert meta["spec_accept_length"] != pytest.approx(figure)
    hist = st.histogram
    assert histogram_accept_length(hist) == pytest.approx(1 + st.accepted_drafts / st.verify_ct)
    cum = [p["cumulative"] for p in served_positions(hist, STEPS)]
    assert 1 + sum(cum) == pytest.approx(histogram_accept_length(hist))  # positions on the same basis
