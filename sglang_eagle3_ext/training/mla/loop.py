"""The MLA route's training loop (training/mla/train.py sets it up): one process, or one per rank under torchrun
with the draft replicated by DDP (the MLA draft fits one device at Kimi-K2.5's width: `train --dry-run`).

Each optimizer step takes --global-batch samples over all ranks (training/sharding.py: a seeded permutation
per epoch, cut into steps, each rank its share, accumulated); every micro-batch's loss is weighted
world_size / (samples in the step), so that DDP's mean over the ranks is the mean over the step's samples
whatever the split. After every epoch: validation over all ranks, then rank 0 writes --out (the draft and the
checkpoint to resume from, training/checkpoint.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path

from .. import sharding
from ..checkpoint import CKPT_DIR, maybe_stop, write_state
from ..distributed import World, all_sum, on_main
from ..loader import stream, to_device
from ..workers import stop_workers
from .step import save_state_dict, self_bias_at, step_loss

CKPT_FILES = ("model_fp32.safetensors", "optimizer.pt", "scheduler.pt")
HISTORY_KEYS = ("step", "epoch", "loss", "accs", "tokens", "time_s", "fetch_s")  # one row per optimizer step


@dataclasses.dataclass
class Schedule:
    G: int  # micro-batches (samples) per optimizer step, all ranks
    A: int  # per rank
    steps_per_epoch: int
    epochs: int
    total: int  # optimizer steps of the whole run


def schedule(n_train: int, G: int, A: int, epochs: int | None, steps: int | None, default_epochs: int) -> Schedule:
    spe = max(1, math.ceil(n_train / G))
    if epochs is None:
        epochs = math.ceil(steps / spe) if steps else default_epochs
    total = min(steps, epochs * spe) if steps else epochs * spe
    return Schedule(G, A, spe, epochs, total)


@dataclasses.dataclass
class Job:
    """Everything the loop needs (built by train.train)."""

    files: list[Path]
    lengths: list[int]
    train: list[int]  # indices into files
    val: list[int]
    cfg: dict  # the draft's config.json
    model: object  # Eagle3MLADraft on the device
    head: object  # the target's lm_head / final norm weight (the teacher)
    norm_w: object
    eps: float
    opts: object  # TrainOptions
    world: World
    device: str
    sched: Schedule
    publisher: object  # checkpoint.Publisher
    identity: dict


class _Steps:
    """What step_loss calls (`forward_steps`), routed through DDP's forward so that its gradient hooks run."""

    def __init__(self, module):
        self.module = module

    def forward_steps(self, *args):
        return self.module(*args)


def _wrap(job: Job):
    import torch

    class Unroll(torch.nn.Module):
        def __init__(self, draft):
            super().__init__()
            self.draft = draft

        def forward(self, ids, aux, steps, bias):
            return self.draft.forward_steps(ids, aux, steps, bias)

    m = Unroll(job.model)
    if not job.world.distributed:
        return m
    from torch.nn.parallel import DistributedDataParallel

    ids = [job.world.local_rank] if job.device.startswith("cuda") else None
    return DistributedDataParallel(m, device_ids=ids, broadcast_buffers=False, gradient_as_bucket_view=True)


def _optim(job: Job):
    import torch

    steps, lr = job.sched.total, job.opts.lr
    opt = torch.optim.AdamW([p for p in job.model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)
    sch = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps))))
    )
    return opt, sch


def _resume(job: Job, opt, sch, state: dict | None) -> tuple[int, int, list]:
    """(first epoch, optimizer steps done, history) from the checkpoint in --out (or a fresh start)."""
    if state is None:
        return 0, 0, []
    import torch
    from safetensors.torch import load_file

    d = Path(job.opts.out) / CKPT_DIR
    sd = load_file(str(d / CKPT_FILES[0]), device=job.device)
    missing, unexpected = job.model.load_state_dict(sd, strict=False)
    frozen = {k for k, p in job.model.named_parameters() if not p.requires_grad}
    lost = sorted(set(missing) - frozen)
    if unexpected or lost:
        raise ValueError(
            f"--resume: {d / CKPT_FILES[0]} does not fit this draft (missing {lost[:3]}, unexpected "
            f"{sorted(unexpected)[:3]}); train afresh with --force"
        )
    opt.load_state_dict(torch.load(d / CKPT_FILES[1], map_location=job.device, weights_only=True))
    sch.load_state_dict(torch.load(d / CKPT_FILES[2], weights_only=True))
    return int(state["epochs_done"]), int(state["global_step"]), list(state.get("history") or [])


def _micro(job: Job, wrapped, item, weight: float, step_no: int, sync: bool):
    """Forward + backward of one sample, its loss scaled by `weight` (0: a padding slot)."""
    import torch

    _, ids, hs = to_device(item, job.device)
    caller = _Steps(wrapped)
    ctx = wrapped.no_sync() if (job.world.distributed and not sync) else contextlib.nullcontext()
    dtype = torch.bfloat16 if job.device.startswith("cuda") else torch.float32
    with ctx, torch.autocast("cuda", dtype=torch.bfloat16, enabled=job.device.startswith("cuda")):
        loss, accs = step_loss(
            caller,
            ids,
            hs,
            job.head,
            job.norm_w,
            job.eps,
            job.opts.ttt_steps,
            dtype,
            self_bias_at(step_no, job.sched.total),
        )
        if not bool(torch.isfinite(loss.detach())):
            raise ValueError(
                f"the loss is not finite at step {step_no} (lr {job.opts.lr}): training diverged; the "
                f"draft's weights would not be finite; this epoch is not saved; lower --lr"
            )
        (loss * weight).backward()
    return float(loss.detach()), accs, int(ids.shape[0])


def _epoch_slots(job: Job, epoch: int, first_step: int):
    """This rank's (file index, weight) per micro-batch of each remaining step of the epoch."""
    order = [job.train[i] for i in sharding.epoch_order(len(job.train), job.opts.seed, epoch)]
    steps = sharding.sample_steps(order, job.sched.G)
    left = job.sched.total - first_step
    steps = steps[: max(0, left)]
    out = []
    for step in steps:
        w = job.world.size / sharding.real_count(step)
        out.append(
            [
                (i, w) if i is not sharding.EMPTY else (step[0], 0.0)
                for i in sharding.my_slots(step, job.world.rank, job.sched.A)
            ]
        )
    return out


def _log_step(job: Job, hist: list, t0: float, say) -> None:
    h, every, total = hist[-1], job.opts.log_every, job.sched.total
    if h["step"] == 1 or h["step"] % every == 0 or h["step"] == total:
        say(
            f"step {h['step']}/{total} epoch {h['epoch'] + 1} loss={h['loss']:.4f} "
            + " ".join(f"acc{k}={a:.3f}" for k, a in enumerate(h["accs"]))
            + f" elapsed={time.perf_counter() - t0:.1f}s"
        )


def _train_epoch(job: Job, wrapped, opt, sch, epoch: int, step: int, hist: list, rec, t0: float, say) -> int:
    slots = _epoch_slots(job, epoch, step)
    it = iter(
        stream(job.files, [i for s in slots for i, _ in s], job.opts.num_workers, pin=job.device.startswith("cuda"))
    )
    try:
        return _train_steps(job, wrapped, opt, sch, epoch, step, hist, rec, t0, say, slots, it)
    finally:  # an interrupted epoch: its reader processes stop here, not when the traceback is dropped
        stop_workers(it)


def _train_steps(job: Job, wrapped, opt, sch, epoch: int, step: int, hist: list, rec, t0: float, say, slots, it) -> int:
    import torch

    T = job.opts.ttt_steps
    for mine in slots:
        step += 1
        ts, fetch, sums, tokens = time.perf_counter(), 0.0, [0.0] * (T + 2), 0
        for j, (i, w) in enumerate(mine):
            tf = time.perf_counter()
            item = next(it)
            fetch += time.perf_counter() - tf
            loss, accs, n = _micro(job, wrapped, item, w, step, sync=j == len(mine) - 1)
            if w:
                rec.add(epoch, [i])
                sums = [a + b for a, b in zip(sums, [loss, *accs, 1.0])]
                tokens += n
        torch.nn.utils.clip_grad_norm_(job.model.parameters(), 1.0)
        opt.step()
        sch.step()
        opt.zero_grad(set_to_none=True)
        if job.device.startswith("cuda"):
            torch.cuda.synchronize()
        g = all_sum(sums, job.world)
        hist.append(
            {
                "step": step,
                "epoch": epoch,
                "loss": g[0] / g[-1],
                "accs": [a / g[-1] for a in g[1:-1]],
                "tokens": tokens,
                "time_s": time.perf_counter() - ts,
                "fetch_s": fetch,
            }
        )
        _log_step(job, hist, t0, say)
    rec.flush(epoch)
    return step


def _validate(job: Job) -> list[float] | None:
    import torch

    T = job.opts.ttt_steps
    mine = job.val[job.world.rank :: job.world.size]
    sums = [0.0] * (T + 1)
    job.model.eval()
    dtype = torch.bfloat16 if job.device.startswith("cuda") else torch.float32
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=job.device.startswith("cuda")):
        it = iter(stream(job.files, mine, job.opts.num_workers, pin=False))
        try:
            for item in it:
                _, ids, hs = to_device(item, job.device)
                _, accs = step_loss(job.model, ids, hs, job.head, job.norm_w, job.eps, T, dtype)
                if accs and all(a == a for a in accs):
                    sums = [s + a for s, a in zip(sums, [*accs, 1.0])]
        finally:
            stop_workers(it)
    job.model.train()
    g = all_sum(sums, job.world)
    return [a / g[-1] for a in g[:-1]] if g[-1] else None


def _publish(job: Job, opt, sch, epochs_done: int, step: int, hist: list, summary: dict) -> None:
    """Rank 0 writes --out: the draft (bf16), the float32 checkpoint, optimizer, scheduler and state."""
    import json

    import torch
    from safetensors.torch import save_file

    sd = {k: v.detach().float().cpu() for k, v in job.model.state_dict().items()}
    trainable = {k for k, p in job.model.named_parameters() if p.requires_grad}

    def build(tmp: Path) -> None:
        save_state_dict(sd, job.cfg, tmp)
        d = tmp / CKPT_DIR
        d.mkdir()
        save_file({k: v.contiguous() for k, v in sd.items() if k in trainable}, str(d / CKPT_FILES[0]))
        torch.save(opt.state_dict(), d / CKPT_FILES[1])
        torch.save(sch.state_dict(), d / CKPT_FILES[2])
        write_state(
            d,
            {
                "epochs_done": epochs_done,
                "global_step": step,
                "identity": job.identity,
                "files": list(CKPT_FILES),
                "history": hist,
            },
        )
        (tmp / "train_summary.json").write_text(
            json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=2, default=str)
        )

    job.publisher.publish(build)


def run(job: Job, state: dict | None, summarize, say) -> dict:
    """Train `job` (continuing `state`, a checkpoint's state.json, when given); returns the run's summary."""
    wrapped = _wrap(job)
    opt, sch = _optim(job)
    epoch0, step, hist = _resume(job, opt, sch, state)
    if state is not None:
        say(f"--resume: continuing after epoch {epoch0} (optimizer step {step}) from {job.opts.out}")
    rec = sharding.Recorder(job.world.rank)
    t0 = time.perf_counter()
    val, summary = None, {}
    for epoch in range(epoch0, job.sched.epochs):
        if step >= job.sched.total:
            break
        step = _train_epoch(job, wrapped, opt, sch, epoch, step, hist, rec, t0, say)
        val = _validate(job)
        if val is not None:
            say(f"val epoch {epoch + 1} " + " ".join(f"acc{k}={a:.3f}" for k, a in enumerate(val)))
        summary = summarize(hist, val, time.perf_counter() - t0)
        _publish(job, opt, sch, epoch + 1, step, hist, summary)
        on_main(lambda e=epoch: maybe_stop(e + 1, job.sched.epochs), job.world)
    if not hist:
        raise ValueError(
            f"no training step ran: every training sample has fewer than {job.opts.ttt_steps + 2} "
            f"tokens (--ttt-steps {job.opts.ttt_steps} + 2)"
        )
    return summary or summarize(hist, val, time.perf_counter() - t0)
