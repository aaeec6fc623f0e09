"""How much memory one training step of a draft takes, found without the memory: the draft is built on torch's
meta device (shapes, no storage) and one forward + loss + backward runs there under a dispatch mode that
follows every tensor's storage until it is freed. The largest sum of live storages is the step's activation
peak: what autograd keeps for the backward, the logits, the loss's and the backward's temporaries. The draft's
own weights, buffers and their gradients are counted apart.

Two kernels are stood in for, since the meta device runs their reference decomposition instead:
scaled_dot_product_attention keeps what the fused kernels keep (q, k, v, the output, a float32 logsumexp per
row, the mask), as the CPU's flash kernel and CUDA's flash / memory-efficient ones do, not the [heads, T, S]
probabilities; masked_select (data-dependent, no meta kernel; speculators' accuracy metric) returns its
largest possible result.
"""

from __future__ import annotations

import contextlib


def _storage_key(t) -> int:
    return t.untyped_storage()._cdata


class LiveBytes:
    """A TorchDispatchMode (built on first use) following the live storages of every op's outputs."""

    def __init__(self, static: set[int]):
        import torch
        from torch.multiprocessing.reductions import StorageWeakRef
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        tracker = self
        self.static, self.live, self.peak = set(static), {}, 0

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor):
                        key = _storage_key(t)
                        old = tracker.live.get(key)
                        # a freed storage's address comes back for a new one: the entry is replaced
                        if key not in tracker.static and (old is None or old[0].expired()):
                            st = t.untyped_storage()
                            tracker.live[key] = (StorageWeakRef(st), st.nbytes())
                tracker.sweep()
                return out

        self.mode = Mode()

    def sweep(self) -> None:
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        self.peak = max(self.peak, sum(n for _, n in self.live.values()))


@contextlib.contextmanager
def _stand_ins():
    import torch
    import torch.nn.functional as F

    class FusedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, mask):
            out = q.new_empty((*q.shape[:-1], v.shape[-1]))
            lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse, *([] if mask is None else [mask]))
            return out

        @staticmethod
        def backward(ctx, g):
            q, k, v = ctx.saved_tensors[:3]
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None

    def sdpa(q, k, v, attn_mask=None, *args, **kwargs):
        return FusedAttention.apply(q, k, v, attn_mask)

    masked_select = torch.masked_select
    saved = F.scaled_dot_product_attention, torch.masked_select
    F.scaled_dot_product_attention = sdpa
    torch.masked_select = lambda x, m, **kw: (
        torch.empty(x.numel(), dtype=x.dtype, device=x.device) if x.is_meta else masked_select(x, m, **kw)
    )
    try:
        yield
    finally:
        F.scaled_dot_product_attention, torch.masked_select = saved


def trace_step(model, make_inputs, step) -> dict:
    """Run `step(model, *make_inputs())` (forward, loss, backward) on the meta device; returns the activation
    peak in bytes (the parameters, buffers and their gradients left out: they are counted apart)."""
    import gc

    import torch

    for p in model.parameters():  # gradients made up front and counted apart: the backward adds into them
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    static = {_storage_key(t) for t in [*model.parameters(), *model.buffers()]}
    static |= {_storage_key(p.grad) for p in model.parameters() if p.grad is not None}
    tracker = LiveBytes(static)
    gc.collect()
    gc.disable()  # frees by reference count only: the same peak on every run
    try:
        with _stand_ins(), tracker.mode:
            inputs = make_inputs()
            step(model, *inputs)
            tracker.sweep()
    finally:
        gc.enable()
    return {"activations": tracker.peak}
