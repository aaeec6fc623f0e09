"""What `swap` takes: the new draft, the server, and how long to wait; each field with a command line is
declared here once (`options.schema.flag`), and `cli/swap.py` derives its parser from it."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ...options import values
from ...options.schema import flag

MAX_TIMEOUT_S = 86_400.0  # a day: a swap waits for the requests in flight, never longer than that
MAX_SETTLE_S = 3_600.0


@dataclasses.dataclass
class SwapOptions:
    """What `swap` takes; its fields are the command's flags (cli/schema.py derives the parser)."""

    url: str = flag(
        required=True, type=values.server_url, help="the running EAGLE-3 server (e.g. http://127.0.0.1:30000)"
    )
    draft: str = flag(
        required=True,
        help="the new draft's folder, in the layout SGLang serves; the server "
        "reads it, so it must be on the server's machine too",
    )
    # the whole swap request: in-flight requests finish first
    timeout: float = flag(
        600.0,
        type=values.number_in(0.0, MAX_TIMEOUT_S),
        help=f"seconds for the whole swap request (requests in flight finish first), at most {MAX_TIMEOUT_S:g}",
    )
    draft_link: str | None = flag(
        None,
        metavar="PATH",
        help="a symlink your launch command names (--speculative-draft-model-path PATH): pointed at the "
        "new draft (os.replace, atomic) once the server serves it, so a restart serves it too; "
        "PATH must be free or a symlink",
    )
    # after a --timeout: how long the server's state is read for the outcome
    settle: float = flag(
        60.0,
        type=values.number_in(0.0, MAX_SETTLE_S),
        metavar="SECONDS",
        help=f"when --timeout passes without a reply, how long to read the server's state for the "
        f"swap's outcome (the server may still be swapping), at most {MAX_SETTLE_S:g}",
    )
    local_check: bool = flag(
        True,
        names="--no-local-check",
        action="store_false",
        help="the folder exists on the server's machine only (an absolute path there): send it unchecked "
        "here; the server applies the same rules (default: checked here first)",
    )
    say: Callable[[str], None] | None = None
