"""Which samples each rank trains on, step by step: the same answer on every rank and in every run.

An epoch is a permutation of the training samples seeded by (seed, epoch). Its samples are cut, in that
order, into global steps of G = --global-batch micro-batches; micro-batch j of a step goes to rank
j // A as its (j % A)-th accumulation step (A = G / world size). A micro-batch is what each trainer takes
at once: one sample (the MLA route) or the samples packed into one sequence of --total-seq-len tokens (the
Llama route, speculators' batching). So every sample is trained on exactly once per epoch, across all ranks,
and the steps depend on G alone: one process accumulating 2 micro-batches and 2 ranks taking one each
compute the same global step. The last step of an epoch may have fewer micro-batches than G; the missing
ones are empty (a rank with one takes a step that contributes nothing) and the loss is averaged over the
real ones.
"""

from __future__ import annotations

import json
import os

from .. import envs
from .report import TrainDraftError

EMPTY = None  # an empty micro-batch slot in a sample step


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The epoch's permutation of range(n) (numpy's PCG64 seeded by (seed, epoch): the same on every platform)."""
    import numpy as np

    return np.random.default_rng([seed, epoch]).permutation(n).tolist()


def sample_steps(order: list[int], G: int) -> list[list[int | None]]:
    """One sample per micro-batch: consecutive G samples of the order per step, the last step padded."""
    steps = [list(order[i : i + G]) for i in range(0, len(order), G)]
    if steps and len(steps[-1]) < G:
        steps[-1] += [EMPTY] * (G - len(steps[-1]))
    return steps


def packed_steps(order: list[int], lengths: list[int], max_len: int, G: int) -> list[list[list[int]]]:
    """Samples packed into G bins of at most max_len tokens per step: each sample, in order, goes to the
    least-filled bin of the current step (the first on ties); one that fits nowhere starts the next step.
    A sample longer than max_len counts as max_len (the collator truncates it)."""
    steps: list[list[list[int]]] = []
    bins: list[list[int]] = [[] for _ in range(G)]
    fill = [0] * G
    for i in order:
        n = min(int(lengths[i]), max_len)
        b = min(range(G), key=lambda k: (fill[k], k))
        if fill[b] + n > max_len:
            steps.append(bins)
            bins, fill = [[] for _ in range(G)], [0] * G
            b = 0
        bins[b].append(i)
        fill[b] += n
    if any(bins):
        steps.append(bins)
    return steps


def accumulation(global_batch: int | None, world_size: int) -> tuple[int, int]:
    """(G, A): micro-batches per optimizer step over all ranks, and per rank. None: one per rank."""

    G = world_size if global_batch is None else global_batch
    if G % world_size:
        raise TrainDraftError(
            f"--global-batch {G} is not a multiple of the {world_size} ranks: each rank takes "
            f"--global-batch / ranks micro-batches per step; give a multiple of {world_size}"
        )
    return G, G // world_size


def my_slots(step: list, rank: int, A: int) -> list:
    """This rank's micro-batches of one global step."""
    return step[rank * A : (rank + 1) * A]


def real_count(step: list) -> int:
    """Micro-batches of the step that hold samples (the loss is averaged over these)."""
    return sum(1 for m in step if m not in (EMPTY, []))


class Recorder:
    """Appends, per epoch, the sample indices this rank trained on to the file SGLANG_EAGLE3_EXT_TRAIN_RECORD_
    SAMPLES names (one JSON line per rank and epoch; a testing aid: each sample once per epoch over all ranks)."""

    def __init__(self, rank: int):

        self.path = envs.get(envs.TRAIN_RECORD_SAMPLES)
        self.rank = rank
        self.seen: dict[int, list[int]] = {}

    def add(self, epoch: int, ids) -> None:
        if self.path:
            self.seen.setdefault(epoch, []).extend(int(i) for i in ids if i is not EMPTY)

    def flush(self, epoch: int) -> None:
        if not self.path:
            return
        line = json.dumps({"rank": self.rank, "epoch": epoch, "ids": self.seen.pop(epoch, [])}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())  # one write of one line: ranks appending at once do not interleave
        finally:
            os.close(fd)
