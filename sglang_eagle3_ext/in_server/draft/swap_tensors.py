"""The live tensors a draft swap writes: found on the scheduler's workers, copied to the host, put back.

Why in place: a running EAGLE-3 server reaches its draft through storage it holds since start-up. Its CUDA graphs
(the draft's multi-step decode, draft extend) replay kernels on the addresses captured then; the draft worker maps
draft tokens to target tokens through its own device copy of the model's hot-token map (`hot_token_id`); an MLA
draft keeps kv_b_proj absorbed into `w_kc` / `w_vc`. The release's weight loaders copy into the parameters
(`param.data.copy_`), but `load_weights` rebinds `hot_token_id` and an MLA draft's post_load_weights rebinds
`w_kc` / `w_vc` to new tensors. `rebind` puts each rebound tensor back and copies the new values into it, and the
worker's map is copied into in place: every address the graphs captured now holds the new draft, so no graph is
re-captured. Parameters the draft shares with the target (the embeddings, the lm_head of a draft without its
own) are the target's: never written, never saved.
"""

from __future__ import annotations

import dataclasses

from ..._log import logger
from ...draft import arch as layouts
from ...server.startup import startup_context


@dataclasses.dataclass
class DraftSide:
    """What a swap touches on one scheduler: the draft model(s), the objects holding a device hot-token map,
    and the target model (whose parameters the draft may share)."""

    models: list
    holders: list
    target: object


def find_draft(manager) -> DraftSide | str:
    """The draft side of SGLang's SchedulerWeightUpdaterManager, or why there is none to swap."""
    spec_worker = getattr(manager, "draft_worker", None)
    if spec_worker is None:
        return (
            "this server runs no draft model: swap replaces the draft of an EAGLE-3 server (--speculative-algorithm "
            "EAGLE3)"
        )
    inner = getattr(spec_worker, "draft_worker", None)
    runners = list(getattr(inner, "draft_runners", None) or [getattr(inner, "draft_runner", None)]) if inner else []
    models = []
    for r in runners:
        m = getattr(r, "model", None)
        if m is not None and all(m is not x for x in models):
            models.append(m)
    archs = {mod.ARCH for mod in layouts.modules()}
    if not models:
        return f"found no draft model runner on the speculative worker {type(spec_worker).__name__}"
    other = [type(m).__name__ for m in models if type(m).__name__ not in archs]
    if other:
        return (
            f"the served draft is a {other[0]}, not an EAGLE-3 draft class ({', '.join(sorted(archs))}): swap "
            f"replaces EAGLE-3 drafts only"
        )
    why = _not_swappable(models)
    if why:
        return why
    holders = [o for o in (spec_worker, inner) if _tensor_attr(o, "hot_token_id") is not None]
    target = getattr(getattr(getattr(manager, "tp_worker", None), "model_runner", None), "model", None)
    return DraftSide(models=models, holders=holders, target=target)


def _not_swappable(models) -> str | None:
    """Why this server's draft cannot be replaced in place, whatever the new draft (None: it can)."""

    for m in models:
        for mod in m.modules():
            qm = getattr(mod, "quant_method", None)
            # a quantized layer repacks its weights after loading into new parameters without weight loaders
            if qm is not None and not type(qm).__name__.startswith("Unquantized"):
                return (
                    f"the served draft is quantized ({type(mod).__name__} uses {type(qm).__name__}, from the "
                    f"server's --quantization): its weights were repacked at start-up and cannot be loaded "
                    f"again in place; restart the server with the new draft"
                )
    sa = startup_context().server_args
    if getattr(sa, "enable_dp_attention_local_control_broadcast", False) is True:
        # each DP group then takes the request in its own scheduler iteration: the TP ranks' verdicts cannot be
        # gathered in step
        return (
            "the server runs with --enable-dp-attention-local-control-broadcast (or elastic EP scale-up): its "
            "TP ranks take a swap at different times; restart the server with the new draft"
        )
    return None


def _tensor_attr(obj, name: str):
    import torch

    v = getattr(obj, "__dict__", {}).get(name)
    return v if isinstance(v, torch.Tensor) else None


def captured_layers(target) -> tuple[list[int] | None, int | None]:
    """(HF indices the target captures now, its number of layers): the `layers_to_capture` of the model that
    holds the decoder layers (a wrapper such as Kimi-K2.5 holds it one or two levels down); (None, None) if none."""
    obj = target
    for _ in range(4):
        inner = getattr(obj, "model", None)
        if inner is not None and isinstance(getattr(inner, "layers_to_capture", None), (list, tuple)):
            n = getattr(getattr(obj, "config", None), "num_hidden_layers", None)
            return [int(i) for i in inner.layers_to_capture], n if isinstance(n, int) else None
        obj = getattr(obj, "language_model", None) or inner
        if obj is None:
            break
    return None, None


class TensorState:
    """Every tensor of the draft side a load may write, a host copy of it, and the way back."""

    def __init__(self, side: DraftSide):
        import torch

        shared = {p.data_ptr() for p in side.target.parameters()} if isinstance(side.target, torch.nn.Module) else set()
        self.side = side
        self.params = [
            (m, name, p) for m in side.models for name, p in m.named_parameters() if p.data_ptr() not in shared
        ]
        self.shared = [(m, name) for m in side.models for name, p in m.named_parameters() if p.data_ptr() in shared]
        # plain tensor attributes (not parameters, not buffers): hot_token_id, w_kc / w_vc
        self.attrs = [
            (mod, attr, t)
            for m in side.models
            for mod in m.modules()
            for attr, t in list(vars(mod).items())
            if type(t) is torch.Tensor
        ]
        self.maps = [(h, _tensor_attr(h, "hot_token_id")) for h in side.holders]
        self.saved: list | None = None
        self.failure = ""  # why a load was undone (the reply's message)

    def skip_names(self, model) -> frozenset[str]:
        """Names under which the release's load_weights would reach a parameter the target owns."""
        out = set()
        for m, name in self.shared:
            if m is model:
                out |= {name, name.removeprefix("model.")}
        return frozenset(out)

    def _live(self) -> list:
        return [p.data for _, _, p in self.params] + [t for _, _, t in self.attrs] + [t for _, t in self.maps]

    def save(self) -> int:
        """Copy every tensor to the host; returns the bytes kept."""
        self.saved = [t.detach().to("cpu", copy=True) for t in self._live()]
        return sum(t.numel() * t.element_size() for t in self.saved)

    def rebind(self, copy: bool = True) -> list[str]:
        """Put back each tensor attribute the load rebound, with the new values copied into it (copy=True);
        returns what could not be (a new tensor of another shape): the swap then fails and is undone."""
        bad = []
        for mod, attr, old in self.attrs:
            new = vars(mod).get(attr)
            if new is old:
                continue
            setattr(mod, attr, old)
            if not copy or new is None:
                continue
            if tuple(new.shape) != tuple(old.shape):
                bad.append(f"{type(mod).__name__}.{attr} became {list(new.shape)}, served {list(old.shape)}")
                continue
            old.copy_(new.to(old.device))
        return bad

    def update_maps(self, model, identity: bool) -> None:
        """The draft worker's device hot-token map from the model's (identity=True: the new draft maps no tokens,
        its draft ids are target ids)."""
        import torch

        for _, live in self.maps:
            if identity:
                live.copy_(torch.arange(live.shape[0], dtype=live.dtype, device=live.device))
            else:
                live.copy_(model.hot_token_id.to(device=live.device, dtype=live.dtype))

    def restore(self) -> None:
        """Every tensor back to its value before the swap (the old draft)."""
        self.rebind(copy=False)
        if self.saved is None:
            return
        for live, kept in zip(self._live(), self.saved):
            live.copy_(kept.to(live.device))
        sync(self.side)


def sync(side: DraftSide) -> None:
    """Wait for the device (a forward still reading the draft before the swap, the copies after)."""
    import torch

    for m in side.models:
        p = next(m.parameters(), None)
        if p is not None and p.device.type == "cuda":
            torch.cuda.synchronize(p.device)
            return


def agree(group, ok: bool, message: str) -> tuple[bool, str]:
    """Every TP rank's verdict: all succeed, or the first failing rank's message (each rank loads its shard, so
    one rank's failure undoes the swap on all)."""
    import torch.distributed as dist

    if group is None or not dist.is_available() or not dist.is_initialized():
        return ok, message
    n = dist.get_world_size(group=group)
    if n <= 1:
        return ok, message
    verdicts: list = [None] * n
    dist.all_gather_object(verdicts, (bool(ok), str(message)), group=group)
    bad = [(r, m) for r, (o, m) in enumerate(verdicts) if not o]
    if not bad:
        return True, message
    rank, msg = bad[0]
    logger.info("EAGLE-3 draft swap: TP rank %d refused, every rank keeps the served draft", rank)
    return False, msg if rank == dist.get_rank(group=group) else f"TP rank {rank}: {msg}"
