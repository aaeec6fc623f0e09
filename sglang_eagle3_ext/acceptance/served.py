"""`eval --url`: the same held-out prompts sent to a running EAGLE-3 (or DFLASH) server, its accept length read from the
replies as `bench` reads them (bench's run_level: greedy, ignore_eos, SGLang's per-request meta_info).

The headline is SGLang's own figure on these requests: 1 + correct drafts / verify rounds, from the replies'
per-round histograms (the counts the server's avg_spec_accept_length sums, less the rounds an overlap scheduler
runs after a request finished); the per-request figure (completion_tokens / spec_verify_ct) stands beside it,
and /get_server_info's lifetime avg_spec_accept_length after the run. A figure no server with these settings
can report is listed under `implausible`, and the served draft is named beside the figures.

Each region of a sample is one request: the tokens before it as the prompt, as many new tokens as the region
holds -- the sequence the prediction walked. Its greedy output is compared with the recorded tokens: where the
server generates something else, prediction and server judged different text.
"""

from __future__ import annotations

from ..bench.run import run_level
from ..boundary import BadInput, Refused, field
from ..server.http_client import Server
from ..server.replies import avg_accept_length
from .stats import histogram_accept_length, regions, served_positions


def requests_for(samples) -> tuple[list[dict], list[int], list[list[int]]]:
    """(prompts, new-token counts, recorded responses), one per region of each sample."""

    prompts, lengths, recorded = [], [], []
    for s in samples:
        ids = s.ids.tolist()
        for a, e in regions(s.mask):
            prompts.append({"input_ids": ids[:a]})
            lengths.append(e - a + 1)
            recorded.append(ids[a : e + 1])
    return prompts, lengths, recorded


def _where(srv) -> str:
    return f"{srv.where('GET', '/get_server_info')} reply"


def _settings(srv, steps: int, draft_tokens: int, reads_window: bool = True, algorithm="EAGLE3", block=False) -> dict:
    """The server's speculative settings; Refused when they are not the ones evaluated. `algorithm`: the one the
    draft's layout is served under; `block`: the draft proposes a block a round (SGLang then runs one step)."""
    from ..server.replies import server_args

    info = srv.server_info()
    args = server_args(info, srv.where("GET", "/get_server_info")) if info is not None else {}
    algo = str(args.get("speculative_algorithm") or "")
    if info is not None and algo.upper() != algorithm:
        raise Refused(
            f"--url {srv.url}: the server runs speculative algorithm {algo[:40] or 'none'}, not {algorithm} "
            f"(the algorithm that serves this draft)"
        )
    if info is not None and field(args, "speculative_adaptive", bool, _where(srv), optional=True):
        # its steps count moves with the batch size (its adaptive config), so its accept length mixes steps counts
        raise Refused(
            f"--url {srv.url}: the server runs --speculative-adaptive, whose steps count changes with the batch, "
            f"while eval predicts one fixed --steps; compare against a server without --speculative-adaptive, "
            f"or measure this one with `sglang-eagle3 bench`"
        )
    window = args.get("speculative_draft_window_size")
    if window is not None and reads_window:  # a draft class that never reads it runs full attention
        raise Refused(
            f"--url {srv.url}: the server runs --speculative-draft-window-size {str(window)[:40]} "
            f"(sliding-window draft attention), which eval does not simulate; compare against a server "
            f"without it, or measure this one with `sglang-eagle3 bench`"
        )
    have = (
        args.get("speculative_num_steps"),
        args.get("speculative_eagle_topk"),
        args.get("speculative_num_draft_tokens"),
    )
    want = (1 if block else steps, 1, draft_tokens)
    if info is not None and None not in have and have != want:
        raise Refused(
            f"--url {srv.url}: the server speculates with steps {have[0]}, topk {have[1]}, draft tokens "
            f"{have[2]}; eval was asked for --steps {steps} --topk 1 --draft-tokens {draft_tokens}"
            + (f" (a block of {draft_tokens}, which SGLang runs as one step)" if block else "")
            + ": give eval the server's settings (or serve with these)"
        )
    return {
        k: args.get(k)
        for k in (
            "model_path",
            "speculative_draft_model_path",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "attention_backend",
            "disable_cuda_graph",
            "speculative_draft_window_size",
        )
        if k in args
    }


def _run_level():

    return run_level


class _NoBar:
    def update(self, n=1):
        pass


def connect(url: str, steps: int, draft_tokens: int, timeout: float = 300.0, layout=None, block: bool = False):
    """(server, its speculative settings), checked before any simulation time is spent; `layout`: the draft's
    (draft/arch: its ALGORITHM, and READS_DRAFT_WINDOW, whether its class runs --speculative-draft-window-size);
    `block`: its network proposes a block a round."""

    srv = Server(url, timeout=timeout)
    if layout is None:
        return srv, _settings(srv, steps, draft_tokens)
    return srv, _settings(srv, steps, draft_tokens, layout.READS_DRAFT_WINDOW, layout.ALGORITHM, block)


def implausible(st, steps: int, server_avg: float | None) -> list[str]:
    """What in the served figures no server speculating `steps` drafts a round can report (empty: nothing)."""
    out, hist = [], list(st.histogram)
    top = steps + 1
    if any(c for c in hist[steps + 1 :]):
        out.append(f"rounds accepting more than {steps} drafts in spec_correct_drafts_histogram {hist}")
    if hist and sum(hist) != st.verify_ct:
        out.append(f"the histograms count {sum(hist)} rounds, spec_verify_ct {st.verify_ct}")
    drafts = sum(j * c for j, c in enumerate(hist))
    if hist and st.accepted_drafts and st.accepted_drafts != drafts:
        out.append(f"spec_num_correct_drafts {st.accepted_drafts} but the histograms hold {drafts}")
    if st.verify_ct and not st.verify_ct <= st.output_tokens <= st.requests + st.verify_ct * top:
        out.append(
            f"{st.output_tokens} completion tokens cannot come from {st.requests} requests in "
            f"{st.verify_ct} rounds of at most {top} tokens"
        )
    if server_avg is not None and not 1.0 <= server_avg <= top:
        out.append(f"/get_server_info avg_spec_accept_length {server_avg:g} outside [1, {top}]")
    return out


def _server_avg(srv) -> tuple[float | None, str | None]:
    """/get_server_info's lifetime avg_spec_accept_length after the run (None: not reported), and why not read."""

    try:
        info = srv.server_info()
        return (avg_accept_length(info, srv.where("GET", "/get_server_info")) if info is not None else None), None
    except BadInput as e:
        return None, f"/get_server_info after the run: {e}"


def serve(srv, settings: dict, samples, steps: int, concurrency: int = 8) -> dict:
    """The served figures on the samples' regions (Refused: unreachable server, bad replies)."""

    url = srv.url
    prompts, lengths, recorded = requests_for(samples)
    if not prompts:
        raise Refused("--url: the held-out samples hold no region to generate (no response tokens)")
    st = _run_level()(srv, "spec", prompts, lengths, concurrency, _NoBar())
    same = sum(list(o or [])[: len(r)] == r for o, r in zip(st.outputs, recorded))
    if not st.verify_ct:
        raise Refused(
            f"--url {url}: the replies carry no speculative statistics (spec_verify_ct): is it serving "
            f"this draft speculatively?"
        )
    hist = list(st.histogram)
    headline = histogram_accept_length(hist)
    server_avg, unread = _server_avg(srv)
    flags = implausible(st, steps, server_avg) + ([unread] if unread else [])
    if not hist:
        flags.append("the replies carry no spec_correct_drafts_histogram: SGLang's figure cannot be read from them")
    if headline is not None and not 1.0 <= headline <= steps + 1:
        flags.insert(0, f"accept length {headline:g} outside [1, {steps + 1}]")
    return {
        "url": url,
        "server": settings,
        "draft": settings.get("speculative_draft_model_path"),
        "requests": st.requests,
        "tokens": st.output_tokens,
        "verify_rounds": st.verify_ct,
        "accepted_drafts": sum(j * c for j, c in enumerate(hist)) if hist else None,
        "accept_length": headline,
        "accept_length_per_request": st.accept_length,
        "server_avg_spec_accept_length": server_avg,
        "histogram": hist,
        "positions": served_positions(hist, steps) if hist else [],
        "outputs_equal_recorded": same,
        "implausible": flags,
        "wall_s": round(st.wall_s, 3),
    }
