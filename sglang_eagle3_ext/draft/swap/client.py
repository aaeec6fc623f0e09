"""A new EAGLE-3 draft into a running SGLang server, checked here first: the library of `sglang-eagle3 swap`.

    report = swap(SwapOptions(url=..., draft=...))

0. Local inputs before the network: `--draft-link` (its folder writable, the path free or a symlink) and the
   draft (the folder, its files, every value finite: the release-independent rules of check_draft).
1. GET /get_server_info: the server's release must have the mechanism (versions.swap_refusal), and each scheduler
   must carry this package's draft report (protocol.STATE_KEY). A server without it would take the request as a
   reload of its target, so then nothing is sent.
2. The draft is judged here by the rules the server applies (check_draft for the server's release, against its
   target when its folder is readable here; built as the served draft: rules.py; fed the HF indices the
   target captures).
3. POST /update_weights_from_disk with model_path = the draft's absolute folder and load_format =
   protocol.LOAD_FORMAT; the reply validated; the pause measured: the request's wall time (the server lets the
   requests in flight finish, holds new ones back, checks and loads the draft, then admits them again). When
   the client's --timeout passes first the server may still swap: its state is read (for up to `settle` s)
   before anything is reported: swapped, refused (its reason), or not finished yet (said so, exit 2).
4. GET /get_server_info again: every scheduler must report the new draft, and SGLang's own record
   (server_args.speculative_draft_model_path) should name it. Only then is `--draft-link` pointed at it
   (os.replace of a new symlink: atomic), so that the launch command naming the link serves it after a restart.
A refusal (here or by the server) is boundary.Refused (exit 2) naming the problem.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ...boundary import BadInput, Refused, read_json_file, writable_dir
from ...server.hf_cache import local_dir
from ...server.http_client import Server, ServerTimeout
from ...versions import SUPPORTED_MAX, capabilities_for_version, swap_refusal
from .. import errors as E
from ..check import check_draft
from ..errors import Problem
from .options import SwapOptions
from .protocol import LOAD_FORMAT, STATE_KEY
from .replies import draft_states, swap_reply
from .rules import against_served, algorithm_refusal, problems_line

UPDATE_ROUTE = "/update_weights_from_disk"
LAUNCH_FLAG = "--speculative-draft-model-path"


class SwapRefused(Refused):
    """A refusal (exit 2) with what is known by then (`report`: the JSON `swap` writes; ok: whether the server
    serves the new draft)."""

    def __init__(self, msg: str, report: dict, ok: bool = False):
        super().__init__(msg)
        self.report = {**report, "ok": ok, "error": msg}


def _server_state(srv, where: str) -> tuple[dict, list[dict]]:
    """(the server's arguments, its schedulers' draft reports); Refused when it cannot take a swap."""
    from ...server.replies import server_args

    info = srv.server_info()
    if info is None:
        raise Refused(f"{srv.url}: answers neither /get_server_info nor /server_info; is it a SGLang server?")
    args = server_args(info, where)
    release = args.get("version")
    if release and (why := swap_refusal(capabilities_for_version(release))):
        raise Refused(f"{srv.url}: {why}")
    if why := algorithm_refusal(args.get("speculative_algorithm")):
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
    """The server's rules applied here (check_draft + rules.against_served) for the server's release
    (scan_values False: the values were read already, by precheck)."""
    from .. import keys, rules

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
    if why := algorithm_refusal(args.get("speculative_algorithm"), spec.layout_module):
        return [Problem(E.SWAP_MISMATCH, f"{draft}: {why}")]
    has_d2t = any(keys.canonical(n)[0] == "d2t" for n in rep.loads)
    return against_served(cfg, spec, served, layout.capture_always_plus_one, has_d2t, str(draft))


def can_swap(url: str, timeout: float = 30.0) -> str:
    """The draft `url` serves now; Refused when that server cannot take a swap (checked before long work)."""

    srv = Server(url, timeout=timeout)
    _, states = _server_state(srv, srv.where("GET", "/get_server_info"))
    return states[0].get("draft")


def _local_draft(opts: SwapOptions, say) -> Path:
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


def _refused(url: str, draft, served, message: str, when: str = "") -> str:
    """The refusal of a swap by the server at `url`, naming it and its reason (an empty one said so)."""
    return f"{url} refused draft {draft}{when}, it keeps serving {served}: {message or 'it gave no reason'}"


def swap(opts: SwapOptions) -> dict:
    """Swap the draft of the server at opts.url for opts.draft; the report (Refused on any refusal)."""

    say = opts.say or (lambda m: None)
    link = check_link(opts.draft_link) if opts.draft_link else None  # local inputs before the network
    draft = _local_draft(opts, say)
    srv = Server(opts.url, timeout=opts.timeout)
    where = srv.where("GET", "/get_server_info")
    args, states = _server_state(srv, where)
    served = states[0]["draft"]
    _note_launched(args, link, say)
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
            _refused(srv.url, draft, served, message), {**base, "pause_s": round(pause, 3), "server_message": message}
        )
    if late is None:
        args_after, after = _read_back(srv, where, draft, message, {**base, "pause_s": round(pause, 3)})
    serving = [s.get("draft") for s in after]
    if any(d != str(draft) for d in serving):
        raise Refused(f"{srv.url} accepted draft {draft} but reports serving {serving}: see its log")
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
        _point_draft_link(link, draft, rep)
    return rep


def _note_launched(args: dict, link: Path | None, say) -> None:
    """Say so when the server's launch record names something other than --draft-link: a restart would not
    serve the link."""
    launched = args.get("speculative_draft_model_path")
    if link is not None and launched not in (str(link), os.path.realpath(link)):
        say(
            f"note: the server's record names {launched}, not --draft-link {link}: a restart serves the link only "
            f"when its launch command names it ({LAUNCH_FLAG} {link})"
        )


def _read_back(srv, where: str, draft: Path, message: str, report: dict) -> tuple[dict, list[dict]]:
    """(server args, draft reports) after the server replied that it swapped; SwapRefused (ok: it said it
    swapped, the report says so, the link waits for proof) when its state cannot be read back."""
    try:
        return _server_state(srv, where)
    except (BadInput, Refused) as e:
        raise SwapRefused(
            f"{srv.url} accepted draft {draft} ({message or 'no message'}) but its state could "
            f"not be read back: {e}; --draft-link was not touched; after a restart, "
            f"{launch_argument(str(draft))} serves it",
            {**report, "server_message": message},
            ok=True,
        ) from None


def _point_draft_link(link: Path, draft: Path, rep: dict) -> None:
    """--draft-link pointed at the draft the server now serves; SwapRefused (ok) naming the launch argument
    that serves it when the link cannot be changed."""
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
                    _refused(srv.url, draft, base["previous_draft"], att["message"], " after the client's timeout"),
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
