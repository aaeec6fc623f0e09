"""A new EAGLE-3 draft into a running SGLang server, checked here first: the library of `sglang-eagle3 swap`.

    report = swap(Options(url=..., draft=...))

1. GET /get_server_info: the server's release must have the mechanism (versions.swap_refusal), and each scheduler
   must carry this package's draft report (swap.STATE_KEY). A server without it would take the request as a
   reload of its target, so then nothing is sent.
2. The draft is judged here by the rules the server applies (check_draft against the server's target when its
   folder is readable here; built as the served draft; fed the HF indices the target captures).
3. POST /update_weights_from_disk with model_path = the draft's absolute folder and load_format =
   swap.LOAD_FORMAT; the reply validated; the pause measured: the request's wall time (the server lets the
   requests in flight finish, holds new ones back, checks and loads the draft, then admits them again).
4. GET /get_server_info again: every scheduler must report the new draft.
A refusal (here or by the server) is boundary.Refused (exit 2) naming the problem.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

from ..boundary import BadInput, Refused, check_type, field, list_of
from . import errors as E
from .swap import LOAD_FORMAT, PROTOCOL, STATE_KEY

UPDATE_ROUTE = "/update_weights_from_disk"


class SwapRefused(Refused):
    """A refusal (exit 2) with what is known by then (`report`: the JSON `swap` writes)."""

    def __init__(self, msg: str, report: dict):
        super().__init__(msg)
        self.report = {**report, "ok": False, "error": msg}


@dataclasses.dataclass
class Options:
    url: str
    draft: str
    timeout: float = 600.0          # the whole swap request: in-flight requests finish first
    local_check: bool = True        # False: the folder is on the server's machine only
    say: Callable[[str], None] | None = None


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
        raise BadInput(f"{at}: 'protocol'", f"{protocol}; this client speaks {PROTOCOL}: use the sglang-eagle3-ext "
                                            f"the server runs")
    out = {"draft": field(rep, "draft", str, at, optional=True), "refusal": field(rep, "refusal", str, at, optional=True)}
    if out["refusal"] is not None:
        return out
    out["spec"] = field(rep, "spec", dict, at)
    out["build"] = field(rep, "build", dict, at, optional=True)
    hf = field(rep, "hf_indices", list, at, optional=True)
    out["hf_indices"] = list_of(hf, int, f"{at}: 'hf_indices'", minimum=0) if hf is not None else None
    out["target_layers"] = field(rep, "target_layers", int, at, optional=True, minimum=1)
    out["token_map"] = field(rep, "token_map", bool, at, optional=True, default=False)
    out["swaps"] = field(rep, "swaps", int, at, optional=True, minimum=0, default=0)
    return out


def swap_reply(out, where: str) -> tuple[bool, str, int]:
    """(success, message, requests paused) of SGLang's /update_weights_from_disk reply (paused: a list per DP
    replica when there are several)."""
    at = f"{where} reply"
    check_type(out, dict, at)
    ok = field(out, "success", bool, at)
    msg = field(out, "message", str, at, optional=True, default="")
    paused = field(out, "num_paused_requests", (int, list), at, optional=True, default=0)
    if isinstance(paused, list):
        paused = sum(list_of(paused, int, f"{at}: 'num_paused_requests'", minimum=0))
    elif paused < 0:
        raise BadInput(f"{at}: 'num_paused_requests'", f"must be >= 0, got {paused}")
    return ok, msg, paused


def _server_state(srv, where: str) -> tuple[dict, list[dict]]:
    """(the server's arguments, its schedulers' draft reports); Refused when it cannot take a swap."""
    from ..server.replies import server_args
    from ..versions import capabilities_for_version, swap_refusal

    info = srv.server_info()
    if info is None:
        raise Refused(f"{srv.url}: answers neither /get_server_info nor /server_info; is it a SGLang server?")
    args = server_args(info, where)
    release = args.get("version")
    if release and (why := swap_refusal(capabilities_for_version(release))):
        raise Refused(f"{srv.url}: {why}")
    states = draft_states(info, where)
    if states is None:
        raise Refused(f"{srv.url}: the server does not run sglang_eagle3_ext's draft swap (no {STATE_KEY!r} in its "
                      f"internal states); start it with SGLANG_EAGLE3_EXT=1 (or `sglang-eagle3 launch`) and this "
                      f"package installed: nothing was sent")
    refused = next((s["refusal"] for s in states if s.get("refusal")), None)
    if refused:
        raise Refused(f"{srv.url}: {refused}")
    return args, states


def local_problems(draft: Path, args: dict, served: dict, say=None) -> list:
    """The server's rules applied here (check_draft + swap_rules.against_served) for the server's release."""
    from ..boundary import read_json_file
    from ..server.hf_cache import local_dir
    from ..versions import SUPPORTED_MAX
    from .check import check_draft
    from . import keys, rules
    from .swap_rules import against_served

    release = args.get("version") or SUPPORTED_MAX
    target = local_dir(args.get("model_path"))
    target = target if target is not None and (target / "config.json").is_file() else None
    if say and target is None:
        say(f"the server's target {args.get('model_path')} is not readable here: the draft is checked against it "
            f"on the server only")
    rep = check_draft(draft, target=target, sglang_version=release, scan_values=True)
    problems = [p for p in rep.errors if p.code != E.DTYPE]   # the server casts into its served dtype
    if problems:
        return problems
    cfg = read_json_file(draft / "config.json", "draft config")
    layout = keys.resolve_layout(release)
    spec, _ = rules.spec_from_config(cfg, layout, where=str(draft / "config.json"))
    has_d2t = any(keys.canonical(n)[0] == "d2t" for n in rep.loads)
    return against_served(cfg, spec, served, layout.capture_always_plus_one, has_d2t, str(draft))


def can_swap(url: str, timeout: float = 30.0) -> str:
    """The draft `url` serves now; Refused when that server cannot take a swap (checked before long work)."""
    from ..server.http_client import Server

    srv = Server(url, timeout=timeout)
    _, states = _server_state(srv, srv.where("GET", "/get_server_info"))
    return states[0].get("draft")


def swap(opts: Options) -> dict:
    """Swap the draft of the server at opts.url for opts.draft; the report (Refused on any refusal)."""
    from ..server.http_client import Server
    from .swap_rules import problems_line

    say = opts.say or (lambda m: None)
    srv = Server(opts.url, timeout=opts.timeout)
    where = srv.where("GET", "/get_server_info")
    args, states = _server_state(srv, where)
    draft = Path(opts.draft).expanduser()
    local = None
    if opts.local_check:
        if not draft.is_dir():
            raise Refused(f"--draft {opts.draft}: no such folder here (a folder on the server's machine only: add "
                          f"--no-local-check, the server applies the same rules)")
        draft = draft.resolve()
        say(f"checking {draft} against the draft {states[0]['draft']} served at {srv.url}")
        problems = local_problems(draft, args, states[0], say)
        if problems:
            raise Refused(f"draft {draft} refused here, nothing was sent: {problems_line(problems)}")
        local = "passed"
    say(f"swapping in {draft} (the server lets the requests in flight finish first)")
    t0 = time.monotonic()
    out = srv.post(UPDATE_ROUTE, {"model_path": str(draft), "load_format": LOAD_FORMAT, "flush_cache": True},
                   ok_status=(400,))
    pause = time.monotonic() - t0
    ok, message, paused = swap_reply(out, srv.where("POST", UPDATE_ROUTE))
    if not ok:
        raise SwapRefused(f"the server refused draft {draft}, it keeps serving {states[0]['draft']}: {message}",
                          {"url": srv.url, "draft": str(draft), "served_draft": states[0]["draft"],
                           "pause_s": round(pause, 3), "server_message": message})
    _, after = _server_state(srv, where)
    serving = [s.get("draft") for s in after]
    if any(d != str(draft) for d in serving):
        raise Refused(f"the server accepted draft {draft} but reports serving {serving}: see its log")
    return {"url": srv.url, "draft": str(draft), "previous_draft": states[0]["draft"], "ok": True,
            "release": args.get("version"), "pause_s": round(pause, 3), "requests_paused": paused,
            "local_check": local or "skipped (--no-local-check)", "hf_indices": states[0].get("hf_indices"),
            "swaps": after[0].get("swaps"), "server_message": message}


def render(rep: dict) -> str:
    return (f"swapped: {rep['url']} now serves draft {rep['draft']} (was {rep['previous_draft']})\n"
            f"  pause: {rep['pause_s']:.2f} s (in-flight requests finished, draft checked and loaded, requests "
            f"admitted again); local check: {rep['local_check']}\n"
            f"  server: {rep['server_message']}")
