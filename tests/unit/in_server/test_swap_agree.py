"""The TP ranks' verdict on a draft swap (in_server/draft/swap_tensors.agree) over a real gloo group of two processes:
every rank swaps, or every rank keeps the served draft and reports the first failing rank's reason."""

from __future__ import annotations

import json
import socket

import pytest

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")


def _rank(rank: int, port: int, verdicts, out: str) -> None:
    import torch.distributed as dist

    from sglang_eagle3_ext.in_server.draft.swap_tensors import agree

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        ok, msg = verdicts[rank]
        got = agree(dist.group.WORLD, ok, msg)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as fh:
        json.dump(list(got), fh)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, verdicts) -> list:
    out = str(tmp_path / "verdict")
    mp.start_processes(_rank, args=(_port(), verdicts, out), nprocs=2, join=True, start_method="spawn")
    return [json.loads(open(f"{out}.{r}").read()) for r in range(2)]


def test_all_ranks_succeed(tmp_path):
    assert _run(tmp_path, [(True, "swapped on 0"), (True, "swapped on 1")]) == [
        [True, "swapped on 0"],
        [True, "swapped on 1"],
    ]


def test_one_rank_refusing_undoes_every_rank(tmp_path):
    got = _run(tmp_path, [(True, "swapped on 0"), (False, "draft refused: [fc-unfused] on 1")])
    assert got == [[False, "TP rank 1: draft refused: [fc-unfused] on 1"], [False, "draft refused: [fc-unfused] on 1"]]


def test_the_first_failing_rank_is_named(tmp_path):
    got = _run(tmp_path, [(False, "bad on 0"), (False, "bad on 1")])
    assert got == [[False, "bad on 0"], [False, "TP rank 0: bad on 0"]]
