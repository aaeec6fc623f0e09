"""The messages between the server's ProcessDumpWriter (process.py) and its child (child.py),
sent pickled over one socket. Plain data only: a batch travels as its layout (where each host tensor lives
in the shared memory), never as tensors; a batch's own segments follow its message as file descriptors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ChunkBatch host tensors (or plain lists of ints: orig_lens on a CPU model, multimodal flags per request)
FIELDS = ("ids", "aux", "pre", "post", "row_ok", "orig_lens", "multimodal")


# ---- server -> child ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    cfg: dict  # dataclasses.asdict(DumpConfig)
    meta: dict


@dataclass(frozen=True)
class HostTensor:
    """A contiguous tensor `offset` bytes into the shared ring, or into the batch's segment `segment`."""

    offset: int
    shape: tuple
    dtype: str  # torch dtype name without "torch."
    segment: int | None = None  # index into the batch's segments (their fds follow the message, in order)
    segment_bytes: int = 0


@dataclass(frozen=True)
class Norm:
    """The final norm's weight (sent once, with the first batch that carries it), as float32 bytes."""

    raw: bytes
    shape: tuple
    dtype: str
    eps: float


@dataclass(frozen=True)
class Batch:
    id: int
    rids: list
    prefix_lens: list
    extend_lens: list
    aux_layout: object
    nbytes: int
    fields: dict = field(default_factory=dict)  # name in FIELDS -> HostTensor | list[int] | None
    norm: Norm | None = None

    def segment_sizes(self) -> dict[int, int]:
        """segment index -> its size, for the fds that follow this message."""
        return {
            f.segment: f.segment_bytes
            for f in self.fields.values()
            if isinstance(f, HostTensor) and f.segment is not None
        }


@dataclass(frozen=True)
class Flush:
    token: int
    timeout: float


@dataclass(frozen=True)
class Stop:
    reason: str  # the server gave up waiting for host memory (backpressure.STALL_S)


@dataclass(frozen=True)
class Close:
    pass


# ---- child -> server ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    pid: int


@dataclass(frozen=True)
class StartFailed:
    error: str


@dataclass(frozen=True)
class Freed:
    batch_id: int  # nothing in the child reads the batch's memory any more


@dataclass(frozen=True)
class Written:
    sample_id: str


@dataclass(frozen=True)
class Busy:
    received: int  # batches the child received so far
    busy: int  # of which, and of their samples, still in work (DumpWriter.busy())


@dataclass(frozen=True)
class Stopped:
    reason: str


@dataclass(frozen=True)
class Flushed:
    token: int
    ok: bool
    stats: dict


@dataclass(frozen=True)
class Closed:
    stats: dict
