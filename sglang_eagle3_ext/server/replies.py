"""What a SGLang server's replies must hold, checked where they arrive: `bench` and `dump run` read only what
passed here. A reply of the wrong shape (a list where an object belongs, a count that is not an integer, a
missing key) is a `BadInput` naming the route and the key: exit 2, never a traceback deeper in.

    out = generate_reply(srv.post("/generate", body), srv.where("POST", "/generate"))
    args = server_args(srv.server_info(), srv.where("GET", "/get_server_info"))
"""

from __future__ import annotations

from ..boundary import BadInput, check_type, field, list_of

# /get_server_info keys read by the tools, with what each must be when present (null: not set)
SERVER_KEY_TYPES = {
    "model_path": str,
    "tokenizer_path": str,
    "speculative_algorithm": str,
    "speculative_num_steps": int,
    "speculative_draft_model_path": str,
    "speculative_eagle_topk": int,
    "speculative_num_draft_tokens": int,
    "attention_backend": str,
    "disable_cuda_graph": bool,
    "disable_decode_cuda_graph": bool,
    "tp_size": int,
    "version": str,
    "skip_tokenizer_init": bool,
}
MAX_DRAFT_TOKENS = 1024  # more would be no EAGLE-3 server; bounds the per-position tables
# meta_info counters of one /generate reply (SGLang 0.5.14+ names, then older ones)
META_COUNTS = (
    "completion_tokens",
    "spec_verify_ct",
    "spec_num_correct_drafts",
    "spec_accepted_drafts",
    "spec_num_proposed_drafts",
    "spec_proposed_drafts",
)
HISTOGRAMS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def server_args(info, where: str) -> dict:
    """The server's arguments from its /get_server_info reply (an object; older releases nest them under
    "server_args"); the keys the tools read are checked, null ones dropped."""
    check_type(info, dict, f"{where} reply")
    args = field(info, "server_args", dict, f"{where} reply", optional=True, default=info)
    out = dict(args)
    for key, types in SERVER_KEY_TYPES.items():
        value = field(args, key, types, f"{where} reply", optional=True)
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    n = out.get("speculative_num_draft_tokens")
    if n is not None and not 1 <= n <= MAX_DRAFT_TOKENS:
        raise BadInput(f"{where} reply: 'speculative_num_draft_tokens'", f"must be 1..{MAX_DRAFT_TOKENS}, got {n}")
    return out


def avg_accept_length(info, where: str) -> float | None:
    """internal_states[0].avg_spec_accept_length of a /get_server_info reply, None when absent."""
    check_type(info, dict, f"{where} reply")
    states = field(info, "internal_states", list, f"{where} reply", optional=True)
    if not states:
        return None
    first = check_type(states[0], dict, f"{where} reply: 'internal_states'[0]")
    v = field(first, "avg_spec_accept_length", float, f"{where} reply: 'internal_states'[0]", optional=True)
    return float(v) if v is not None else None


def generate_reply(out, where: str, need_ids: bool = False) -> dict:
    """One /generate reply as {"output_ids": [int] | None, "text": str | None, "meta": {counter: int},
    "histogram": [int]}; `need_ids`: output_ids must be there."""
    at = f"{where} reply"
    check_type(out, dict, at)
    ids = field(out, "output_ids", list, at, optional=True)
    if ids is not None:
        list_of(ids, int, f"{at}: 'output_ids'", minimum=0)
    text = field(out, "text", str, at, optional=True)
    if ids is None and (need_ids or text is None):
        raise BadInput(f"{at}: 'output_ids'", "missing" + ("" if need_ids else " (and no 'text')"))
    meta = field(out, "meta_info", dict, at, optional=True, default={})
    counts = {k: field(meta, k, int, f"{at}: 'meta_info'", optional=True, minimum=0) for k in META_COUNTS}
    hist: list = []
    for key in HISTOGRAMS:
        h = field(meta, key, list, f"{at}: 'meta_info'", optional=True)
        if h:
            hist = list_of(h, int, f"{at}: 'meta_info': {key!r}", minimum=0)
            if len(hist) > MAX_DRAFT_TOKENS + 1:
                raise BadInput(f"{at}: 'meta_info': {key!r}", f"more than {MAX_DRAFT_TOKENS + 1} entries")
            break
    return {
        "output_ids": ids,
        "text": text,
        "meta": {k: v for k, v in counts.items() if v is not None},
        "histogram": hist,
    }
