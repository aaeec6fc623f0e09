"""speculators' `Trainer`, as the Llama route runs it (training/speculators/patches.py swaps it in for one run).

Kept from speculators: the model, its loss and metrics, the optimizers and schedulers, FSDP (`--fsdp-shard`
with more than one rank: its own `apply_fully_sharded`, mixed precision in the hidden states' dtype), the
resume logic (epoch, global step, the scheduler), validation. Ours:

* the batches: speculators' multipack sampler splits the data by the number of ranks (so one process and two
  ranks pack different batches) and drops an epoch's last samples; `PackedSampler` packs global steps of
  --global-batch sequences of --total-seq-len tokens (training/sharding.py), every sample once per epoch;
* the step loop (`train_epoch`): gradient accumulation over this rank's share of a step, each sequence's loss
  weighted world_size / (sequences in the step), so that FSDP's mean over the ranks is the step's mean;
  each micro-batch's random draws (a DFlash draft's anchors) seeded by its place in the run, so that they do
  not depend on the ranks or on --resume; the loader's waiting time is measured beside the step's;
* the checkpoints (`FullStateCheckpointer`): model and optimizer gathered to full, float32 state dicts that
  rank 0 writes once; they load on any number of ranks (speculators' own pick their format by world size);
* after each epoch's checkpoint and validation, `ctx.publish` writes --out (training/checkpoint.py);
* Ctrl-C and SIGTERM: speculators' handler (it saves a checkpoint of the epoch cut short, then returns) is left
  out, so the command's own (interrupts.py) stops the run.
"""

from __future__ import annotations

import time

from .. import sharding
from ..distributed import barrier, current
from ..init_from import expected_of, load_into
from ..report import TrainDraftError, say


class PackedSampler:
    """A DataLoader batch sampler: this rank's micro-batches of every step of the epoch, in order."""

    def __init__(self, lengths, max_len: int, seed: int, G: int, rank: int, A: int):
        self.lengths, self.max_len, self.seed, self.G, self.rank, self.A = list(lengths), max_len, seed, G, rank, A
        self.epoch = 0
        self._cache: dict[int, list] = {}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def steps(self, epoch: int) -> list:
        if epoch not in self._cache:
            order = sharding.epoch_order(len(self.lengths), self.seed, epoch)
            self._cache = {epoch: sharding.packed_steps(order, self.lengths, self.max_len, self.G)}
        return self._cache[epoch]

    def __iter__(self):
        for step in self.steps(self.epoch):
            yield from (list(b) for b in sharding.my_slots(step, self.rank, self.A))

    def __len__(self) -> int:
        return len(self.steps(self.epoch)) * self.A


def rebuild_loader(loader, sampler):
    """One of speculators' loaders (its dataset, collator, workers) with `sampler` as its batch sampler and workers
    that leave interrupts to this process (training/workers.py)."""
    from ..workers import QuietLoader, quiet_workers

    return QuietLoader(
        loader.dataset,
        batch_sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
        persistent_workers=loader.persistent_workers and loader.num_workers > 0,
        multiprocessing_context=loader.multiprocessing_context,
        worker_init_fn=quiet_workers(loader.worker_init_fn),
    )


def checkpointer_class(base):
    """A subclass of speculators' BaseCheckpointer writing full float32 state dicts from rank 0."""
    import torch
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    full = StateDictOptions(full_state_dict=True, cpu_offload=True)

    class FullStateCheckpointer(base):
        last_state_dict = None

        def save_checkpoint(self, model, optimizer, epoch, float_dtype=torch.float32):
            opts = optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]
            msd = get_model_state_dict(model, options=full)  # collective under FSDP
            osd = get_optimizer_state_dict(model, opts, options=full)
            if current().main:
                # the frozen weights (embeddings, heads: the target's) are not trained: a resume takes them
                # from the target again; save_pretrained pops what it writes, hence the copy
                frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
                model.save_pretrained(
                    self.path / str(epoch), state_dict={k: v for k, v in msd.items() if k not in frozen}
                )
                torch.save(osd, self.optimizer_path(epoch))
                self._copy_train_command(epoch)
                self.last_state_dict = msd
            barrier()

        def load_model_state_dict(self, model, float_dtype=None):
            from speculators.train.checkpointer import load_safetensors_state_dict

            sd = load_safetensors_state_dict(self.model_path(self.previous_epoch), "cpu")
            set_model_state_dict(model, sd, options=StateDictOptions(full_state_dict=True, strict=False))

        def load_optimizer_state_dict(self, model, optimizer, float_dtype=None):
            opts = optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]
            for o in opts:  # the scheduler that adds initial_lr is made after this load
                for g in o.param_groups:
                    g.setdefault("initial_lr", g["lr"])
            osd = torch.load(self.optimizer_path(self.previous_epoch), map_location="cpu", weights_only=True)
            set_optimizer_state_dict(model, opts, osd, options=StateDictOptions(full_state_dict=True))

    return FullStateCheckpointer


def plan_epochs(sampler: PackedSampler, epochs: int, steps: int | None, epochs_given: bool) -> tuple[int, int]:
    """(epochs, optimizer steps in total): --steps runs as many epochs as it needs (at most --epochs when
    given); an epoch's step count depends on how its order packs."""
    counts, total = [], 0
    limit = epochs if (epochs_given or steps is None) else 10**6
    while len(counts) < limit and (steps is None or total < steps):
        counts.append(len(sampler.steps(len(counts))))
        total += counts[-1]
    return len(counts), (min(steps, total) if steps is not None else total)


def _reduce(metrics: dict, world) -> dict:
    import torch
    from speculators.train.utils import normalize_counted_metrics

    keys = sorted(metrics)
    t = torch.stack([metrics[k].float().reshape(()) for k in keys])
    if world.distributed:
        import torch.distributed as dist

        dist.all_reduce(t)
    return normalize_counted_metrics(dict(zip(keys, t.tolist())), 1)


def _plan_run(ctx, config, lengths) -> tuple[PackedSampler, object]:
    """This rank's sampler over the samples' `lengths` and speculators' TrainConfig `config` set to its plan
    (epochs, total steps, a checkpoint per epoch); the plan goes into the run's result and is said."""
    w = ctx.world
    sampler = PackedSampler(lengths, ctx.total_seq_len, ctx.seed, ctx.G, w.rank, ctx.A)
    epochs, total = plan_epochs(sampler, config.num_epochs, ctx.steps, ctx.epochs_given)
    if total == 0:
        raise TrainDraftError("the training split has no batches")
    config = config._replace(
        num_epochs=epochs, scheduler_total_steps=total, max_steps=total, checkpoint_freq=1.0, save_best=False
    )
    ctx.result.update(steps_per_epoch=len(sampler.steps(0)), epochs=epochs, global_batch=ctx.G)
    ctx.progress.total = total
    say(
        f"{len(sampler.steps(0))} steps/epoch of {ctx.G} sequences x {ctx.total_seq_len} tokens "
        f"({w.size} process(es) x {ctx.A}), {epochs} epoch(s), {total} steps"
    )
    return sampler, config


def make_trainer_class(base, ctx):
    """speculators' Trainer with our sampler, step loop, checkpointer and per-epoch output; `ctx`: the run
    (speculators/run.RunContext)."""
    import torch

    class DraftTrainer(base):
        def __init__(self, model, config, train_loader, val_loader=None):
            sampler, config = _plan_run(ctx, config, train_loader.dataset.approx_lengths)
            import logging

            logging.getLogger("speculators.metrics").addHandler(ctx.progress)
            self.recorder = sharding.Recorder(ctx.world.rank)
            if val_loader is not None:
                val_loader = rebuild_loader(val_loader, val_loader.batch_sampler)
            super().__init__(model, config, rebuild_loader(train_loader, sampler), val_loader)

        def setup_trainer(self):
            from speculators.train.checkpointer import BaseCheckpointer

            self.checkpointer = checkpointer_class(BaseCheckpointer)(self.config.save_path)
            super().setup_trainer()

        def setup_model(self):

            # stock code: model.to(local_rank) with local_rank an int, i.e. an accelerator
            self.local_rank = torch.device("cpu") if ctx.device == "cpu" else self.local_rank
            expected = expected_of(self.model) if ctx.init_weights is not None else None  # names before wrapping
            for k, v in ctx.config_extra.items():  # speculators' configs keep extra fields: every save records them
                setattr(self.model.config, k, v)
            super().setup_model()
            if ctx.init_weights is not None and self.checkpointer.previous_epoch == -1:
                from safetensors.torch import load_file

                # every rank passes the full state dict: set_model_state_dict places it (one process, FSDP, DDP)
                load_into(self.model, load_file(str(ctx.init_weights)), ctx.opts.init_from, expected)

        def train_epoch(self, epoch, *, step_callback=None):
            train_epoch(self, ctx, epoch)

        def maybe_save_checkpoint(self, epoch, local_step=0):
            super().maybe_save_checkpoint(epoch, local_step)
            if isinstance(epoch, int):
                ctx.prune(self.checkpointer.path, epoch)

        def maybe_update_best(self, epoch, val_metrics):
            super().maybe_update_best(epoch, val_metrics)
            ctx.publish(self, epoch)

        def run_training(self):
            t0 = time.perf_counter()
            # speculators' own run_training catches SIGINT/SIGTERM, saves an "interrupted" checkpoint and returns
            # as if done; here an interrupt is the command's (interrupts.py: --out keeps the last epoch)
            try:
                getattr(base.run_training, "__wrapped__", base.run_training)(self)
            finally:  # before the working folder they read from is removed
                from ..workers import stop_workers

                stop_workers(self.train_loader, self.val_loader)
            ctx.result["train_seconds"] = time.perf_counter() - t0
            if ctx.epochs_published < self.config.num_epochs:
                raise TrainDraftError(
                    f"training was interrupted after epoch {ctx.epochs_published}: --out holds "
                    f"that epoch; continue with --resume"
                    if ctx.epochs_published
                    else "training was interrupted before its first epoch completed: --out was not "
                    "written; run the command again"
                )

    return DraftTrainer


def _micro_batch(tr, batch) -> dict:
    """A collated batch on the trainer's device, without the collator's bookkeeping entries."""
    import torch

    return {
        k: v.to(tr.local_rank, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
        if not k.startswith("__") and k != "error_records"
    }


def _set_sync(tr, world, sync: bool) -> None:
    """FSDP reduces gradients on the last micro-batch of a step only."""
    if world.distributed and hasattr(tr.model, "set_requires_gradient_sync"):
        tr.model.set_requires_gradient_sync(sync)


def _slot_seed(seed: int, epoch: int, step: int, slot: int) -> int:
    """The random draws of one micro-batch (a DFlash draft's anchors) seeded by where it sits in the run: the same
    on any number of ranks and after --resume."""
    import numpy as np

    return int(np.random.SeedSequence([seed, epoch, step, slot]).generate_state(1)[0])


def train_epoch(tr, ctx, epoch: int) -> None:
    """One epoch of optimizer steps, each accumulating this rank's micro-batches of a global step; one metric
    record per step on speculators' metric logger (what training/speculators/progress.py prints)."""
    import logging

    import torch

    w, kw = ctx.world, tr.config.train_call_kwargs or {}
    tr.model.train()
    sampler = tr.train_loader.batch_sampler
    sampler.set_epoch(epoch)
    it = iter(tr.train_loader)
    for si, step in enumerate(sampler.steps(epoch)):
        if tr.global_step >= tr.config.max_steps:
            break
        mine = sharding.my_slots(step, w.rank, ctx.A)
        ts, fetch, tokens, acc = time.perf_counter(), 0.0, 0, {}
        tr._optimizers_zero_grad()
        for j, micro in enumerate(mine):
            tf = time.perf_counter()
            batch = _micro_batch(tr, next(it))
            fetch += time.perf_counter() - tf
            weight = w.size / sharding.real_count(step) if micro else 0.0
            _set_sync(tr, w, j == len(mine) - 1)
            torch.manual_seed(_slot_seed(ctx.seed, epoch, si, w.rank * ctx.A + j))
            with torch.autocast(tr.device_type, dtype=tr.config.hidden_states_dtype):
                _, loss, metrics = tr.model(**batch, **kw)
            (loss * weight).backward()
            for k, v in metrics.items():  # an empty micro-batch counts for nothing (same keys on every rank)
                acc[k] = acc.get(k, 0.0) + v.detach().float() * (1.0 if micro else 0.0)
            if micro:
                tokens += int((batch["document_ids"] != -1).sum())
                tr.recorder.add(epoch, micro)
        torch.nn.utils.clip_grad_norm_(tr.model.parameters(), 1.0)
        tr._optimizers_step()
        lrs = {type(o).__name__: o.param_groups[0]["lr"] for o in tr.optimizers}
        tr._schedulers_step()
        if str(tr.device_type) == "cuda" and torch.cuda.is_available():
            torch.cuda.synchronize()
        step_s = time.perf_counter() - ts
        logging.getLogger("speculators.metrics").info(
            {
                "train": _reduce(acc, w),
                "epoch": epoch,
                "global_step": tr.global_step,
                "lr": lrs if len(lrs) > 1 else next(iter(lrs.values())),
                "profile": {
                    "step_ms": step_s * 1e3,
                    "fetch_ms": fetch * 1e3,
                    "tokens": tokens,
                    "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
                },
            },
            extra={"step": tr.global_step},
        )
        tr.global_step += 1
    tr.recorder.flush(epoch)
