"""The processes of one training run: one (a plain `train`) or one per rank under `torchrun`.

torchrun (single-node, or multi-node through its rendezvous) starts one process per rank with RANK,
WORLD_SIZE and LOCAL_RANK set; `session` joins that group: nccl on CUDA (each rank on cuda:LOCAL_RANK), gloo
on CPU. Outside torchrun (or with WORLD_SIZE 1) the run is one process and nothing here talks to anyone.

Rank 0 alone reads what is read once (the target, the data's metadata), writes the output and prints progress;
`on_main` runs a step there and hands its result (or its refusal) to every rank, so that a refusal stops every
rank with the same message instead of leaving the others waiting in a collective.
"""

from __future__ import annotations

import contextlib
import dataclasses

from .. import envs
from .._log import log_once
from .report import TrainDraftError, set_quiet


@dataclasses.dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: str = "cpu"  # "cpu", "cuda" (one process), "cuda:N" (rank on GPU N)
    backend: str | None = None  # None: one process, no group

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


class RelayedError(TrainDraftError):
    """A refusal made on rank 0, raised on the other ranks too; only rank 0 prints it."""

    echo = False


_current = World()


def current() -> World:
    """The world of the run in progress (one process when none is)."""
    return _current


def torchrun_env() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) as torchrun sets them; None outside torchrun."""

    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    raw = [envs.external(n) for n in names]
    if all(v is None for v in raw):
        return None
    try:
        rank, size, local = (int(v) for v in raw)
    except (TypeError, ValueError):
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(names, raw))
        raise TrainDraftError(
            f"torchrun's variables are incomplete or not integers ({shown}): start the run with "
            f"`torchrun --nproc-per-node N -m sglang_eagle3_ext.cli.train ...`, or unset them "
            f"for a one-process run"
        ) from None
    if size < 1 or not 0 <= rank < size or local < 0:
        raise TrainDraftError(f"torchrun's variables disagree (RANK={rank}, WORLD_SIZE={size}, LOCAL_RANK={local})")
    return rank, size, local


def launched_rank() -> int:
    """This process's rank under torchrun (0 outside it, or where torchrun's variables are unusable): rank 0 alone
    writes a report."""
    try:
        env = torchrun_env()
    except TrainDraftError:
        return 0
    return env[0] if env else 0


def _join(device: str, rank: int, size: int, local: int) -> World:
    import torch
    import torch.distributed as dist

    backend = "nccl" if device.startswith("cuda") else "gloo"
    if device.startswith("cuda"):
        if local >= torch.cuda.device_count():
            raise TrainDraftError(
                f"LOCAL_RANK {local} but torch sees {torch.cuda.device_count()} CUDA device(s): "
                f"give torchrun --nproc-per-node <= the GPUs of each node"
            )
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        kw = {"device_id": torch.device(device)} if backend == "nccl" else {}
        dist.init_process_group(backend, **kw)
    if (dist.get_rank(), dist.get_world_size()) != (rank, size):
        raise TrainDraftError(
            f"the process group is rank {dist.get_rank()} of {dist.get_world_size()}, torchrun said {rank} of {size}"
        )
    if rank == 0:  # the other ranks train quietly
        log_once(
            "train-world", "training on %d processes (torchrun, %s); rank 0 on %s prints for all", size, backend, device
        )
    return World(rank=rank, size=size, local_rank=local, device=device, backend=backend)


@contextlib.contextmanager
def session(device: str):
    """The run's world for the duration of the block; under torchrun the process group is joined (and left
    again only if this call made it)."""
    global _current
    import importlib

    env = torchrun_env()
    if env is None or env[1] == 1:
        world = World(device=device)
        made = False
    else:
        dist = importlib.import_module("torch.distributed")
        made = not dist.is_initialized()
        world = _join(device, *env)
    previous, _current = _current, world
    set_quiet(not world.main)
    ok = False
    try:
        yield world
        ok = True
    except BaseException as e:
        ok = _every_rank(e)  # an error all ranks raise together: they all reach the barrier below
        raise
    finally:
        _current = previous
        set_quiet(False)
        if made:
            dist = importlib.import_module("torch.distributed")
            if dist.is_initialized():
                if ok:  # a rank that leaves while another still reads or writes tears gloo's pairs down under it
                    dist.barrier()
                dist.destroy_process_group()


def _every_rank(e: BaseException) -> bool:
    """Whether `e` (or an error it was raised from) is one that every rank raised at the same point."""
    while e is not None:
        if getattr(e, "every_rank", False):
            return True
        e = e.__cause__ or e.__context__
    return False


def _on_every_rank(e: BaseException) -> BaseException:
    e.every_rank = True
    return e


def barrier(world: World | None = None) -> None:
    world = world or _current
    if world.distributed:
        import torch.distributed as dist

        dist.barrier()


def broadcast(value, world: World | None = None):
    """Rank 0's `value` on every rank (any picklable object)."""
    world = world or _current
    if not world.distributed:
        return value
    import torch.distributed as dist

    box = [value if world.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_main(fn, world: World | None = None):
    """fn() on rank 0; its result on every rank. A TrainDraftError (or any refusal with a message) there is
    raised on every rank: the original on rank 0, a RelayedError elsewhere."""
    world = world or _current
    if not world.distributed:
        return fn()
    result, error = None, None
    if world.main:
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - handed to the other ranks, then re-raised as it was
            error = e
    shared = broadcast((result, None if error is None else str(error)), world)
    if error is not None:
        raise _on_every_rank(error)
    if shared[1] is not None:
        raise _on_every_rank(RelayedError(f"rank 0: {shared[1]}"))
    return shared[0]


def agree(fn, world: World | None = None):
    """fn() on every rank (each checks its share of something); when it raised anywhere, every rank raises:
    its own error where it failed, the first failing rank's message (a RelayedError) elsewhere."""
    world = world or _current
    if not world.distributed:
        return fn()
    import torch.distributed as dist

    result, error = None, None
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - handed to the other ranks, then re-raised as it was
        error = e
    said: list = [None] * world.size
    dist.all_gather_object(said, None if error is None else str(error))
    if error is not None:
        raise _on_every_rank(error)
    bad = next(((r, m) for r, m in enumerate(said) if m is not None), None)
    if bad is not None:
        raise _on_every_rank(RelayedError(f"rank {bad[0]}: {bad[1]}"))
    return result


def all_sum(values: list[float], world: World | None = None) -> list[float]:
    """Element-wise sum of `values` over the ranks (float64 on the CPU: the same figure on every rank)."""
    world = world or _current
    if not world.distributed:
        return list(values)
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device="cpu" if world.backend == "gloo" else world.device)
    dist.all_reduce(t)
    return t.cpu().tolist()
