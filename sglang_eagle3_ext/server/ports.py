"""A free local port for a server this package starts (SGLang servers, the NCCL preflight's rendezvous)."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """A free port below 45000: SGLang derives more ports from the one it is given (0.5.14's gRPC port is
    port + 10000, which must stay valid), so the kernel's pick from the whole range will not do."""
    while True:
        port = random.randrange(20000, 45000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
