"""`eval --url`: the same held-out prompts sent to a running EAGLE-3 server, its accept length read from the
replies as `bench` reads them (bench's run_level: greedy, ignore_eos, SGLang's per-request meta_info).

Each region of a sample is one request: the tokens before it as the prompt, as many new tokens as the region
holds -- the sequence the prediction walked. Its greedy output is compared with the recorded tokens: where the
server generates something else, prediction and server judged different text.
"""
from __future__ import annotations

from ..boundary import Refused


def requests_for(samples) -> tuple[list[dict], list[int], list[list[int]]]:
    """(prompts, new-token counts, recorded responses), one per region of each sample."""
    from .stats import regions

    prompts, lengths, recorded = [], [], []
    for s in samples:
        ids = s.ids.tolist()
        for a, e in regions(s.mask):
            prompts.append({"input_ids": ids[:a]})
            lengths.append(e - a + 1)
            recorded.append(ids[a:e + 1])
    return prompts, lengths, recorded


def _settings(srv, steps: int, draft_tokens: int) -> dict:
    """The server's speculative settings; Refused when they are not the ones evaluated."""
    from ..server.replies import server_args

    info = srv.server_info()
    args = server_args(info, srv.where("GET", "/get_server_info")) if info is not None else {}
    algo = str(args.get("speculative_algorithm") or "")
    if info is not None and algo.upper() != "EAGLE3":
        raise Refused(f"--url {srv.url}: the server runs speculative algorithm {algo or 'none'}, not EAGLE3")
    have = (args.get("speculative_num_steps"), args.get("speculative_eagle_topk"),
            args.get("speculative_num_draft_tokens"))
    want = (steps, 1, draft_tokens)
    if info is not None and None not in have and have != want:
        raise Refused(f"--url {srv.url}: the server speculates with steps {have[0]}, topk {have[1]}, draft tokens "
                      f"{have[2]}; eval was asked for --steps {steps} --topk 1 --draft-tokens {draft_tokens}: give "
                      f"eval the server's settings (or serve with these)")
    return {k: args.get(k) for k in ("model_path", "speculative_draft_model_path", "speculative_num_steps",
                                     "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend",
                                     "disable_cuda_graph") if k in args}


def _run_level():
    from ..bench.run import run_level

    return run_level


class _NoBar:
    def update(self, n=1):
        pass


def connect(url: str, steps: int, draft_tokens: int, timeout: float = 300.0):
    """(server, its speculative settings), checked before any simulation time is spent."""
    from ..server.http_client import Server

    srv = Server(url, timeout=timeout)
    return srv, _settings(srv, steps, draft_tokens)


def serve(srv, settings: dict, samples, steps: int, concurrency: int = 8) -> dict:
    """The served figures on the samples' regions (Refused: unreachable server, bad replies)."""
    from .stats import served_positions

    url = srv.url
    prompts, lengths, recorded = requests_for(samples)
    if not prompts:
        raise Refused("--url: the held-out samples hold no region to generate (no response tokens)")
    st = _run_level()(srv, "spec", prompts, lengths, concurrency, _NoBar())
    same = sum(list(o or [])[:len(r)] == r for o, r in zip(st.outputs, recorded))
    if not st.verify_ct:
        raise Refused(f"--url {url}: the replies carry no speculative statistics (spec_verify_ct): is it serving "
                      f"EAGLE-3 with this draft?")
    return {"url": url, "server": settings, "requests": st.requests, "tokens": st.output_tokens,
            "verify_rounds": st.verify_ct, "accept_length": st.accept_length, "histogram": st.histogram,
            "positions": served_positions(st.histogram, steps), "outputs_equal_recorded": same,
            "wall_s": round(st.wall_s, 3)}
