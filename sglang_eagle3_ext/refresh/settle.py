"""The cursor's journal entries, and the settling, at the start of a refresh, of an earlier one that stopped
between recording its samples as pending and settling them (refresh/cursor.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..boundary import BadInput, Refused, read_json_file


def same_draft(a, b) -> bool:
    """Whether two draft paths name the same folder (None names none)."""
    if a is None or b is None:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def entry(**kw) -> dict:
    """A journal entry of the cursor, stamped now."""
    return {"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **kw}


def settle(c, say) -> None:
    """A refresh that stopped between recording its samples as pending and settling them: used when its draft
    got as far as serving (accepted, and with --swap served by the server), else left unused."""
    p = c.pending
    out, n = Path(p["out"]), len(p["trained"]) + len(p["heldout"])
    try:
        rep = read_json_file(out / "refresh.json", "refresh report")
    except BadInput:
        rep = None
    if rep is None or rep.get("refresh_id") != p.get("id"):
        used, why = False, f"its --out {out} was never completed"
    elif not rep.get("accepted"):
        used, why = False, "its draft was not accepted"
    elif not p.get("swap_url"):
        used, why = True, f"its draft {p['draft']} was accepted"
    else:
        from ..draft.swap.client import can_swap

        try:
            served = can_swap(p["swap_url"])
        except (Refused, BadInput) as e:
            raise Refused(
                f"{c.path}: the refresh into {out} stopped while swapping its draft into "
                f"{p['swap_url']}, which cannot say now which draft it serves ({e}); start that server "
                f"and run refresh again, or delete 'pending' from the cursor to leave its samples "
                f"unused"
            ) from None
        used = same_draft(served, p["draft"])
        why = f"{p['swap_url']} {'serves' if used else 'does not serve'} its draft {p['draft']}"
    say(
        f"an earlier refresh into {out} stopped before settling its {n} sample(s): {why}, so they are "
        f"{'recorded as used by it' if used else 'left for this refresh'}"
    )
    c.finish(
        entry(
            accepted=bool(rep and rep.get("accepted")),
            reason=f"stopped; settled later: {why}",
            out=str(out),
            draft=p["draft"],
            samples=n,
        ),
        used,
    )
