"""The replies of a server running the draft swap, validated: its schedulers' draft reports (protocol.STATE_KEY in
/get_server_info) and SGLang's /update_weights_from_disk answer. Outside input: a wrong type or range is BadInput
naming the key, never a crash later in the client."""

from __future__ import annotations

from ...boundary import BadInput, check_type, field, list_of
from .protocol import PROTOCOL, STATE_KEY

MAX_KEYS = 4096  # build keys a report may name (a draft class reads a few dozen)
MAX_TEXT = 4000  # characters of a server's message kept


def draft_states(info, where: str) -> list[dict] | None:
    """Each scheduler's draft report from a /get_server_info reply (None: the server carries none), validated."""
    check_type(info, dict, f"{where} reply")
    states = field(info, "internal_states", list, f"{where} reply", optional=True) or []
    out = []
    for i, st in enumerate(states):
        at = f"{where} reply: 'internal_states'[{i}]"
        rep = field(check_type(st, dict, at), STATE_KEY, dict, at, optional=True)
        if rep is None:
            return None
        out.append(_state(rep, f"{at}: {STATE_KEY!r}"))
    return out or None


def _state(rep: dict, at: str) -> dict:
    protocol = field(rep, "protocol", int, at)
    if protocol != PROTOCOL:
        raise BadInput(
            f"{at}: 'protocol'", f"{protocol}; this client speaks {PROTOCOL}: use the sglang-eagle3-ext the server runs"
        )
    out = {
        "draft": field(rep, "draft", str, at, optional=True),
        "refusal": field(rep, "refusal", str, at, optional=True),
    }
    if out["refusal"] is not None:
        return out
    out["spec"] = field(rep, "spec", dict, at)
    out["build"] = field(rep, "build", dict, at, optional=True)
    keys = field(rep, "build_keys", list, at, optional=True)
    if keys is not None:
        if len(keys) > MAX_KEYS:
            raise BadInput(f"{at}: 'build_keys'", f"{len(keys)} keys; no draft class reads more than {MAX_KEYS}")
        out["build_keys"] = list_of(keys, str, f"{at}: 'build_keys'")
    hf = field(rep, "hf_indices", list, at, optional=True)
    out["hf_indices"] = list_of(hf, int, f"{at}: 'hf_indices'", minimum=0) if hf is not None else None
    out["target_layers"] = field(rep, "target_layers", int, at, optional=True, minimum=1)
    if out["hf_indices"] and out["target_layers"] and max(out["hf_indices"]) > out["target_layers"]:
        raise BadInput(
            f"{at}: 'hf_indices'",
            f"{out['hf_indices']} for a target of {out['target_layers']} layers "
            f"(HF hidden_states run 0..{out['target_layers']})",
        )
    out["token_map"] = field(rep, "token_map", bool, at, optional=True, default=False)
    out["swaps"] = field(rep, "swaps", int, at, optional=True, minimum=0, default=0)
    out["attempts"] = field(rep, "attempts", int, at, optional=True, minimum=0)
    last = field(rep, "last_attempt", dict, at, optional=True)
    if last is not None:
        la = f"{at}: 'last_attempt'"
        out["last_attempt"] = {
            "path": field(last, "path", str, la),
            "ok": field(last, "ok", bool, la),
            "message": field(last, "message", str, la, optional=True, default="")[:MAX_TEXT],
        }
    return out


def swap_reply(out, where: str) -> tuple[bool, str, int]:
    """(success, message, requests paused) of SGLang's /update_weights_from_disk reply (paused: a list per DP
    replica when there are several)."""
    at = f"{where} reply"
    check_type(out, dict, at)
    ok = field(out, "success", bool, at)
    msg = field(out, "message", str, at, optional=True, default="")[:MAX_TEXT]
    paused = field(out, "num_paused_requests", (int, list), at, optional=True, default=0)
    if isinstance(paused, list):
        paused = sum(list_of(paused, int, f"{at}: 'num_paused_requests'", minimum=0))
    elif paused < 0:
        raise BadInput(f"{at}: 'num_paused_requests'", f"must be >= 0, got {paused}")
    return ok, msg, paused
