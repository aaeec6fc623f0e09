"""A new EAGLE-3 draft into a running SGLang server, checked here first: the library of `sglang-eagle3 swap`.

    report = swap(Options(url=..., draft=...))

0. Local inputs before the network: `--draft-link` (its folder writable, the path free or a symlink) and the
   draft (the folder, its files, every value finite: the release-independent rules of check_draft).
1. GET /get_server_info: the server's release must have the mechanism (versions.swap_refusal), and each scheduler
   must carry this package's draft report (swap.STATE_KEY). A server without it would take the request as a
   reload of its target, so then nothing is sent.
2. The draft is judged here by the rules the server applies (check_draft for the server's release, against its
   target when its folder is readable here; built as the served draft: swap_rules; fed the HF indices the
   target captures).
3. POST /update_weights_from_disk with model_path = the draft's absolute folder and load_format =
   swap.LOAD_FORMAT; the reply validated; the pause measured: the request's wall time (the server lets the
   requests in flight finish, holds new ones back, checks and loads the draft, then admits them again). When
   the client's --timeout passes first the server may still swap: its state is read (for up to `settle` s)
   before anything is reported: swapped, refused (its reason), or not finished yet (said so, exit 2).
4. GET /get_server_info again: every scheduler must report the new draft, and SGLang's own record
   (server_args.speculative_draft_model_path) should name it. Only then is `--draft-link` pointed at it
   (os.replace of a new symlink: atomic), so that the launch command naming the link serves it after a restart.
A refusal (here or by the server) is boundary.Refused (exit 2) naming the problem.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Callable

from ..boundary import BadInput, Refused, check_type, field, list_of, read_json_file, writable_dir
from ..server.hf_cache import local_dir
from ..server.http_client import Server, ServerTimeout
from ..versions import SUPPORTED_MAX, capabilities_for_version, swap_refusal
from . import errors as E
from .check import check_draft
from .swap import LOAD_FORMAT, PROTOCOL, STATE_KEY
from .swap_rules import against_served, problems_line

UPDATE_ROUTE = "/update_weights_from_disk"
LAUNCH_FLAG = "--speculative-draft-model-path"
MAX_KEYS = 4096  # build keys a report may name (a draft class reads a few dozen)
MAX_TEXT = 4000  # characters of a server's message kept


class SwapRefused(Refused):
    """A refusal (exit 2) with what is known by then (`report`: the JSON `swap` writes; ok: whether the server
    serves the new draft)."""

    def __init__(self, msg: str, report: dict, ok: bool = False):
        super().__init__(msg)
        self.report = {**report, "ok": ok, "error": msg}


@dataclasses.dataclass
class Options:
    url: str
    draft: str
    timeout: float = 600.0  # the whole swap request: in-flight requests finish first
    local_check: bool = True  # False: the folder is on the server's machine only
    say: Callable[[str], None] | None = None
    draft_link: str | None = None  # a symlink the launch command names: pointed at the draft once it serves
    settle: float = 60.0  # after a --timeout: how long the server's state is read for the outcome


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


def _server_state(srv, where: str) -> tuple[dict, list[dict]]:
    """(the server's arguments, its schedulers' draft reports); Refused when it cannot take a swap."""
    from ..server.replies import server_args

    info = srv.server_info()
    if info is None:
        raise Refused(f"{srv.url}: answers neither /get_server_info nor /server_info; is it a SGLang server?")
    args = server_args(info, where)
    release = args.get("version")
    if release and (why := swap_refusal(capabilities_for_version(release))):
        raise Refused(f"{srv.url}: {why}")
    states = draft_states(info, where)
    if states is None:
        raise Refused(
            f"{srv.url}: the server does not run sglang_eagle3_ext's draft swap (no {STATE_KEY!r} in its "
            f"internal states); start it with SGLANG_EAGLE3_EXT=1 (or `sglang-eagle3 launch`) and this "
            f"package installed: nothing was sent"
        )
    refused = next((s["refusal"] for s in states if s.get("refusal")), None)
    if refused:
        raise Refused(f"{srv.url}: {refused}")
    return args, states


# verdicts that depend on the server's release (or its dtype): judged once the server said which it runs
_RELEASE_CODES = (E.UNSUPPORTED_BY_RELEASE, E.DRAFT_CLASS, E.DTYPE)


def check_link(link: str) -> Path:
    """--draft-link PATH, checked before anything is sent: its folder exists and is writable here, and PATH is
    free or a symlink (swap points a symlink at the draft; it never replaces a file or a folder)."""

    if not link or "\x00" in link:
        raise BadInput(f"--draft-link {link!r}", "must be a path")
    p = Path(os.path.abspath(os.path.expanduser(link)))
    if not p.parent.is_dir():
        raise BadInput(f"--draft-link {link}", f"no folder {p.parent}; create it or give another path")
    writable_dir(p.parent, "--draft-link's folder")
    if os.path.lexists(p) and not os.path.islink(p):
        kind = "a folder" if p.is_dir() else "a file"
        raise BadInput(
            f"--draft-link {link}",
            f"is {kind}, not a symlink: swap points a symlink at the new draft "
            f"and never replaces a file or a folder; give the symlink your launch "
            f"command names (or a new path)",
        )
    return p


def point_link(link: Path, draft: str) -> None:
    """Make `link` a symlink to `draft` in one step: a new symlink beside it, renamed over it (os.replace), the
    folder synced; the old link stays whole if anything fails."""
    import secrets

    tmp = link.with_name(f".{link.name}.swap-{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(draft, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        fd = os.open(link.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def precheck(draft: Path) -> None:
    """The rules that need no server, here, before it is contacted: the folder, its config and files, every
    tensor's shape against the config, every value finite (the release's and the target's rules follow once the
    server said which)."""

    rep = check_draft(draft, target=None, sglang_version=SUPPORTED_MAX, scan_values=True)
    problems = [p for p in rep.errors if p.code not in _RELEASE_CODES]
    if problems:
        raise Refused(f"draft {draft} refused here, nothing was sent: {problems_line(problems)}")


def local_problems(draft: Path, args: dict, served: dict, say=None, scan_values: bool = True) -> list:
    """The server's rules applied here (check_draft + swap_rules.against_served) for the server's release
    (scan_values False: the values were read already, by precheck)."""
    from . import keys, rules

    release = args.get("version") or SUPPORTED_MAX
    target = local_dir(args.get("model_path"))
    target = target if target is not None and (target / "config.json").is_file() else None
    if say and target is None:
        say(
            f"the server's target {args.get('model_path')} is not readable here: the draft is checked against it "
            f"on the server only"
        )
    rep = check_draft(draft, target=target, sglang_version=release, scan_values=scan_values)
    problems = [p for p in rep.errors if p.code != E.DTYPE]  # the server casts into its served dtype
    if problems:
        return problems
    cfg = read_json_file(draft / "config.json", "draft config")
    layout = keys.resolve_layout(release)
    spec, _ = rules.spec_from_config(cfg, layout, where=str(draft / "config.json"))
    has_d2t = any(keys.canonical(n)[0] == "d2t" for n in rep.loads)
    return against_served(cfg, spec, served, layout.capture_always_plus_one, has_d2t, str(draft))


def can_swap(url: str, timeout: float = 30.0) -> str:
    """The draft `url` serves now; Refused when that server cannot take a swap (checked before long work)."""

    srv = Server(url, timeout=timeout)
    _, states = _server_state(srv, srv.where("GET", "/get_server_info"))
    return states[0].get("draft")


def _local_draft(opts: Options, say) -> Path:
    """The draft as sent: checked here first (opts.local_check), else an absolute path on the server's machine."""
    draft = Path(opts.draft).expanduser()
    if not opts.local_check:
        if not draft.is_absolute():
            raise Refused(
                f"--draft {opts.draft}: with --no-local-check give the folder's absolute path on the "
                f"server's machine (the server reads it)"
            )
        return draft
    if not draft.is_dir():
        raise Refused(
            f"--draft {opts.draft}: no such folder here (a folder on the server's machine only: add "
            f"--no-local-check, the server applies the same rules)"
        )
    draft = draft.resolve()
    say(f"checking {draft} (files, shapes, values) before contacting the server")
    precheck(draft)
    return draft


def swap(opts: Options) -> dict:
    """Swap the draft of the server at opts.url for opts.draft; the report (Refused on any refusal)."""

    say = opts.say or (lambda m: None)
    link = check_link(opts.draft_link) if opts.draft_link else None  # local inputs before the network
    draft = _local_draft(opts, say)
    srv = Server(opts.url, timeout=opts.timeout)
    where = srv.where("GET", "/get_server_info")
    args, states = _server_state(srv, where)
    served = states[0]["draft"]
    launched = args.get("speculative_draft_model_path")
    if link is not None and launched not in (str(link), os.path.realpath(link)):
        say(
            f"note: the server's record names {launched}, not --draft-link {link}: a restart serves the link only "
            f"when its launch command names it ({LAUNCH_FLAG} {link})"
        )
    local = None
    if opts.local_check:
        say(f"checking {draft} against the draft {served} served at {srv.url}")
        problems = local_problems(draft, args, states[0], say, scan_values=False)
        if problems:
            raise Refused(f"draft {draft} refused here, nothing was sent: {problems_line(problems)}")
        local = "passed"
    base = {
        "url": srv.url,
        "draft": str(draft),
        "previous_draft": served,
        "release": args.get("version"),
        "draft_link": str(link) if link else None,
    }
    say(f"swapping in {draft} (the server lets the requests in flight finish first)")
    t0 = time.monotonic()
    late = None
    try:
        out = srv.post(
            UPDATE_ROUTE, {"model_path": str(draft), "load_format": LOAD_FORMAT, "flush_cache": True}, ok_status=(400,)
        )
        ok, message, paused = swap_reply(out, srv.where("POST", UPDATE_ROUTE))
    except ServerTimeout as e:  # the server may still swap: what it says now decides, not the lost reply
        late = str(e)
        ok, message, paused = True, "", None
        args_after, after = _settle(srv, where, draft, states, opts.settle, say, late, base)
    pause = time.monotonic() - t0
    if not ok:
        raise SwapRefused(
            f"the server refused draft {draft}, it keeps serving {served}: {message}",
            {**base, "pause_s": round(pause, 3), "server_message": message},
        )
    if late is None:
        try:
            args_after, after = _server_state(srv, where)
        except (BadInput, Refused) as e:  # it said it swapped: the report says so, the link waits for proof
            raise SwapRefused(
                f"the server accepted draft {draft} ({message or 'no message'}) but its state could "
                f"not be read back: {e}; --draft-link was not touched; after a restart, "
                f"{launch_argument(str(draft))} serves it",
                {**base, "pause_s": round(pause, 3), "server_message": message},
                ok=True,
            ) from None
    serving = [s.get("draft") for s in after]
    if any(d != str(draft) for d in serving):
        raise Refused(f"the server accepted draft {draft} but reports serving {serving}: see its log")
    record = args_after.get("speculative_draft_model_path")
    if record is not None and record != str(draft):
        say(
            f"note: SGLang's record of the draft (speculative_draft_model_path in /get_server_info) still names "
            f"{record} (a server running an older sglang_eagle3_ext): a restart serves what its launch command "
            f"names"
        )
    rep = {
        **base,
        "ok": True,
        "pause_s": None if late else round(pause, 3),
        "requests_paused": paused,
        "local_check": local or "skipped (--no-local-check)",
        "hf_indices": states[0].get("hf_indices"),
        "swaps": after[0].get("swaps"),
        "server_message": message,
        "server_record": record,
        "reply_lost": late,
        "seconds": round(pause, 3),
        "launch_argument": launch_argument(str(link) if link else str(draft)),
    }
    if link is not None:
        try:
            point_link(link, str(draft))
        except OSError as e:
            raise SwapRefused(
                f"the server serves draft {draft}, but --draft-link {link} could not be pointed at it "
                f"({e.strerror or e}): a restart with {LAUNCH_FLAG} {link} serves what the link names; "
                f"restart with {launch_argument(str(draft))} instead",
                {**rep, "launch_argument": launch_argument(str(draft))},
                ok=True,
            ) from None
    return rep


def launch_argument(path: str) -> str:
    """The launch argument that serves `path` after a restart."""
    import shlex

    return f"{LAUNCH_FLAG} {shlex.quote(path)}"


def _settle(srv, where: str, draft: Path, before: list[dict], settle: float, say, late: str, base: dict):
    """(server args, draft reports) once the server shows the swap done; SwapRefused when it shows this draft
    refused, or still shows neither `settle` seconds after the client's timeout."""
    say(f"{late}; reading the server's state for up to {settle:g} s: it may still be swapping")
    n_before = before[0].get("attempts")
    deadline = time.monotonic() + settle
    last = "no answer"
    while True:
        try:
            args, states = _server_state(srv, where)
            if all(s.get("draft") == str(draft) for s in states):
                say(f"the server swapped {draft} in after the client's timeout")
                return args, states
            att, n = states[0].get("last_attempt"), states[0].get("attempts")
            if (
                att
                and att["path"] == str(draft)
                and not att["ok"]
                and isinstance(n, int)
                and isinstance(n_before, int)
                and n > n_before
            ):
                raise SwapRefused(
                    f"the server refused draft {draft} after the client's timeout, it keeps serving "
                    f"{base['previous_draft']}: {att['message']}",
                    {**base, "pause_s": None, "server_message": att["message"], "reply_lost": late},
                )
            last = f"it serves {states[0].get('draft')}"
        except (BadInput, Refused) as e:
            if isinstance(e, SwapRefused):
                raise
            last = str(e)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(1.0, left))
    raise SwapRefused(
        f"not confirmed: {late}; {settle:g} s later {last} and reports no outcome for {draft}: the "
        f"server may still swap it (the requests in flight finish first); nothing was changed here. "
        f"GET {srv.url}/get_server_info tells which draft it serves; --timeout and --settle set the waits",
        {**base, "pause_s": None, "reply_lost": late, "state": "undetermined"},
    )


def render(rep: dict) -> str:
    pause = (
        f"{rep['pause_s']:.2f} s (in-flight requests finished, draft checked and loaded, requests admitted again)"
        if rep.get("pause_s") is not None
        else f"not measured (the reply was lost: {rep.get('reply_lost')}; the server showed the swap done "
        f"{rep.get('seconds', 0):.1f} s after the request)"
    )
    lines = [
        f"swapped: {rep['url']} now serves draft {rep['draft']} (was {rep['previous_draft']})",
        f"  pause: {pause}; local check: {rep['local_check']}",
        f"  server: {' '.join(str(rep['server_message']).split())}",
    ]
    if rep.get("draft_link"):
        lines.append(f"  after a restart: {rep['launch_argument']} (now -> {rep['draft']}) serves it")
    else:
        lines.append(f"  after a restart: launch with {rep['launch_argument']} to serve it (or use --draft-link)")
    return "\n".join(lines)
