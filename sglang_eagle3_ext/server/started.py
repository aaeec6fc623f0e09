"""What every server this package starts shares: SGLang's EAGLE-3 flags for a chain draft, and the stop of the
server's process group (SGLang's schedulers and detokenizer go with it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

STOP_GRACE_S = 60.0  # a server's shutdown, before its process group is killed


def eagle3_chain_args(steps: int, draft: str | os.PathLike | None = None) -> list[str]:
    """SGLang's EAGLE-3 flags for a chain draft of `steps` steps (top-k 1, draft tokens = steps + 1); the draft's
    path among them when given."""
    path = ["--speculative-draft-model-path", str(draft)] if draft is not None else []
    return [
        "--speculative-algorithm",
        "EAGLE3",
        *path,
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(steps + 1),
    ]


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL after `grace_s`; a group already gone is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
