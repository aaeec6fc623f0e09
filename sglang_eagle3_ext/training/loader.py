"""Reading the hidden-state files while training: a pool of worker processes reads ahead of the step, each
file memory-mapped by safetensors (only the two tensors are copied out), so a step waits on the disk only
when the disk is slower than the training.

At Kimi-K2.5's width a sample is ~57 KB per token (3 aux states + the final one, 7168 wide, bf16); read in
the training process, one 2k-token sample is ~117 MB of page-cache copying per step. The worker pool and
pinned host memory (on CUDA) take that off the step: benchmarks/bench_train.py measures the loader's share.
"""

from __future__ import annotations

from pathlib import Path

IDS, STATES = "token_ids", "hidden_states"


def sample_length(path: Path) -> int:
    """Tokens in one file, from its header (nothing is read but the header)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return int(f.get_slice(IDS).get_shape()[0])


def read_sample(path: Path):
    """(token ids int64 [L], states [L, K+1, H]) of one file."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor(IDS).long(), f.get_tensor(STATES)


class SampleFiles:
    """A map-style dataset over hs files: item i = (i, ids, states) of file i."""

    def __init__(self, files):
        self.files = [str(p) for p in files]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        ids, hs = read_sample(Path(self.files[i]))
        return i, ids, hs


def stream(files, indices: list[int], num_workers: int, pin: bool, prefetch: int = 4):
    """The items of `indices`, in that order, read ahead by `num_workers` processes (0: in this process)."""
    from .workers import QuietLoader, quiet_workers

    return QuietLoader(
        SampleFiles(files),
        sampler=list(indices),
        batch_size=None,
        num_workers=num_workers,
        pin_memory=pin,
        prefetch_factor=prefetch if num_workers else None,
        persistent_workers=False,
        worker_init_fn=quiet_workers(),
    )


def to_device(item, device: str):
    i, ids, hs = item
    nb = device.startswith("cuda")
    return i, ids.to(device, non_blocking=nb), hs.to(device, non_blocking=nb)
