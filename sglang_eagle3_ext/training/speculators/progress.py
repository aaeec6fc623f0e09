"""Progress lines of the speculators trainer, read from its own metric records (training/speculators/train.py).
Epochs are counted from 1 for the user: speculators' records and bars count them from 0."""

from __future__ import annotations

import logging
import re
import time

from ..report import say


class TrainingProgress(logging.Handler):
    """Reads speculators' metric records (dicts on the `speculators.metrics` logger) and prints them."""

    def __init__(self, every: int, ttt_steps: int, total_steps: int | None):
        super().__init__(level=logging.INFO)
        self.every = max(1, every)
        self.ttt = ttt_steps
        self.total = total_steps
        self.history: list[dict] = []
        self.val: list[dict] = []
        self.t0 = time.perf_counter()
        self.tokens = 0

    def emit(self, record):
        msg = record.msg
        if not isinstance(msg, dict):
            return
        if "train" in msg:
            m = dict(msg["train"])
            prof = msg.get("profile") or {}
            step = int(msg.get("global_step", len(self.history))) + 1
            ntok = prof.get("tokens", prof.get("tokens_per_s", 0.0) * prof.get("step_ms", 0.0) / 1000.0)
            self.tokens += ntok
            m.update(
                step=step,
                tokens=ntok,
                tokens_per_s=prof.get("tokens_per_s", 0.0),
                epoch=msg.get("epoch"),
                lr=msg.get("lr"),
                time_s=prof.get("step_ms", 0.0) / 1000.0,
                fetch_s=prof.get("fetch_ms", 0.0) / 1000.0,
            )
            self.history.append(m)
            if step == 1 or step % self.every == 0 or (self.total and step >= self.total):
                accs = " ".join(f"acc{k}={m.get(f'full_acc_{k}', float('nan')):.3f}" for k in range(self.ttt))
                tot = f"/{self.total}" if self.total else ""
                lr = msg.get("lr")
                lr = next(iter(lr.values())) if isinstance(lr, dict) else lr
                say(
                    f"step {step}{tot} epoch {_shown(msg.get('epoch'))} loss={m.get('loss', float('nan')):.4f} {accs} "
                    f"tok/s={m['tokens_per_s']:.0f} lr={lr:.2e} elapsed={time.perf_counter() - self.t0:.1f}s"
                )
        elif "val" in msg:
            v = dict(msg["val"])
            self.val.append(v)
            accs = " ".join(f"acc{k}={v.get(f'full_acc_{k}_epoch', float('nan')):.3f}" for k in range(self.ttt))
            say(f"val epoch {_shown(msg.get('epoch'))} loss={v.get('loss_epoch', float('nan')):.4f} {accs}")


def _shown(epoch):
    return epoch + 1 if isinstance(epoch, int) else epoch


def bar_counting_from_one(bar):
    """speculators' `tqdm(loader, desc=f"Epoch {epoch}")` with the epoch counted from 1, as our lines count it."""

    def numbered(iterable=None, desc=None, **kw):
        m = re.fullmatch(r"Epoch (\d+)", desc or "")
        return bar(iterable, desc=f"Epoch {int(m[1]) + 1}" if m else desc, **kw)

    return numbered
