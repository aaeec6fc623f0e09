"""Before SGLang starts: run `check` on the draft (EAGLE-3 or DFlash) the command names.

Why in the launcher: an unconverted speculators checkpoint, a wrong K, a draft/target dtype mismatch or a NaN
weight otherwise surfaces minutes later inside a scheduler (or, historically, as accept length 1.00). The draft's
layout must be the one the algorithm serves (a DFlash draft under EAGLE3 and the reverse fail deep in start-up),
and no server flag may override what it was trained with (a DFlash block size: SGLang takes the flag silently). The check
reads every weight once (the NaN/Inf scan the loader would refuse on), with a progress line when that takes
long; SGLang then reads the same files, mostly from the page cache. scan_values=False: headers only, and the
decision says "values not scanned".
"""

from __future__ import annotations

from pathlib import Path

from ..draft import arch as layouts
from ..draft import errors as E
from ..draft.check import check_draft
from ..draft.hub import resolve
from .nccl import Decision

NAME = "draft pre-check"


class DraftCheckFailed(Exception):
    """The draft's check report has errors (the message is the report)."""


def precheck(
    algorithm: str | None,
    draft: str | None,
    target: str | None,
    version: str | None,
    dtype: str | None = "auto",
    scan_values: bool = True,
    flags: dict | None = None,
) -> Decision | None:
    """None when there is nothing to check; a Decision (kind check) when the draft is fine or cannot be
    checked here; raises DraftCheckFailed with the report when it would not serve correctly.
    dtype: SGLang's --dtype; an explicit one runs draft and target alike, so no dtype mismatch can arise.
    flags: SGLang's parsed server flags (dest -> value) the draft's layout checks (launch_problems)."""
    algorithm = (algorithm or "").upper()
    if not draft or algorithm not in {m.ALGORITHM for m in layouts.modules()}:
        return None

    local, hub_id, note = resolve(draft)
    if local is None:  # a hub id not in the local cache (never downloaded here), or no such directory
        return Decision(
            NAME,
            "skipped",
            note if hub_id else f"{draft} is not a local directory: not checked before start",
            kind="check",
            action="warn",
        )
    if not version:
        return Decision(
            NAME, "skipped", "SGLang not installed here, its key layout is unknown", kind="check", action="warn"
        )

    rep = check_draft(
        local,
        target=target if target and Path(target).is_dir() else None,
        sglang_version=version,
        scan_values=scan_values,
        progress=True,
    )
    if (dtype or "auto") != "auto":
        rep.problems = [p for p in rep.problems if p.code != E.DTYPE]
    if rep.errors:
        raise DraftCheckFailed(rep.render())
    _served_as_trained(rep, algorithm, flags or {})
    warn = [p for p in rep.problems if p.warning]
    where = f"{draft} ({note})" if hub_id else draft
    values = (
        f"values scanned ({rep.scanned_bytes / 2**20:.1f} MiB, no NaN/Inf)"
        if rep.values_scanned
        else "values not scanned"
    )
    return Decision(
        NAME,
        "passed",
        f"{where}: SGLang builds {rep.draft_class}; {len(rep.loads)} tensors would load "
        f"for SGLang {rep.release}; {values}"
        + (f"; {len(warn)} warning(s): " + "; ".join(map(str, warn)) if warn else ""),
        kind="check",
        action="warn" if warn else "ok",
    )


def _served_as_trained(rep, algorithm: str, flags: dict) -> None:
    """The algorithm serves the draft's layout, and no flag overrides what the draft was trained with."""
    if rep.spec is None:
        return
    lay = rep.spec.layout_module
    if lay.ALGORITHM != algorithm:
        raise DraftCheckFailed(
            f"{rep.draft}: a {lay.LABEL or lay.ARCH} draft ({lay.ARCH}) is served by --speculative-algorithm "
            f"{lay.ALGORITHM}, not {algorithm}: use --speculative-algorithm {lay.ALGORITHM}"
        )
    said = lay.launch_problems(rep.spec.dims, flags)
    if said:
        raise DraftCheckFailed(f"{rep.draft}: {said[0]}")
