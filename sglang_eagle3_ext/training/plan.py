"""`train --dry-run`: what a run would take, per rank, before anything is trained. Reads the target's config.json
only (no weights), and --data's sample lengths when given (their headers).

Per rank: the weights (float32 masters; with FSDP, the Llama route's, sharded over the ranks plus the
module being gathered), the gradients and the optimizer's state (AdamW: two float32 values per trainable
weight; sharded like the weights), and the activation peak of one micro-batch, counted by running one step of
the real draft on the meta device (training/memory_trace.py) at the plan's length: --total-seq-len tokens for
the Llama route (speculators pads every packed sequence to it), the longest sample of --data for the MLA route
(else --total-seq-len). A warning when the total passes the device's memory (or --device-memory-gib).
"""

from __future__ import annotations

from pathlib import Path

from ..boundary import BadInput
from ..draft import arch as layouts
from . import sharding
from .data import find_hs_dir, list_hs_files, parse_layer_ids, read_layer_ids_from_metadata
from .distributed import torchrun_env
from .loader import sample_length
from .options import TrainOptions
from .report import TrainDraftError
from .target_view import text_config

GIB = 2**30
ADAMW_STATES = 2


def _target_config(a: TrainOptions) -> dict:

    try:
        return text_config(Path(a.target))
    except BadInput as e:
        raise TrainDraftError(f"--target: {e}") from None


def _world_size(a: TrainOptions) -> int:

    if a.world_size is not None:
        return a.world_size
    env = torchrun_env()
    return env[1] if env else 1


def _aux_layers(a: TrainOptions) -> int:

    ids = parse_layer_ids(a.layer_ids)
    if ids is None and a.data is not None:
        ids, _ = read_layer_ids_from_metadata(Path(a.data))
    return len(ids) if ids else 3


def _lengths(a: TrainOptions) -> list[int]:
    """The samples' lengths from their headers (none without --data)."""
    if a.data is None:
        return []

    try:
        return [sample_length(p) for p in list_hs_files(find_hs_dir(Path(a.data)))]
    except TrainDraftError:
        raise
    except Exception as e:  # noqa: BLE001 - an unreadable header: the run itself would refuse the file by name
        raise TrainDraftError(
            f"--data: a sample's header is unreadable ({type(e).__name__}: {e}); fix or remove "
            f"it, or plan without --data"
        ) from None


def _device_gib(a: TrainOptions, device: str) -> float | None:
    if a.device_memory_gib is not None:
        return float(a.device_memory_gib)
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / GIB
    return None


def plan_draft(a: TrainOptions) -> dict:
    """The plan of the run `a` describes (nothing is trained or written)."""
    import torch

    tcfg = _target_config(a)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    world = _world_size(a)
    G, A = sharding.accumulation(a.global_batch, world)
    K = _aux_layers(a)
    lengths = _lengths(a)
    layout = layouts.get(a.draft_arch)
    packed = layout.TRAIN_PADS_TO_TOTAL_SEQ_LEN
    T = a.total_seq_len if packed or not lengths else max(lengths)
    try:
        sizes = layouts.resolve(layout.PLAN)(a, tcfg, K, T, device, world)
    except TrainDraftError:
        raise
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        ZeroDivisionError,
        OverflowError,
        RuntimeError,
        NotImplementedError,
    ) as e:
        # the config's sizes do not make a draft (torch refuses the shapes, a head size does not divide...)
        raise TrainDraftError(
            f"--target {a.target}: its config.json does not describe a {a.draft_arch} draft "
            f"({type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]})"
        ) from None
    per_step = G * T if packed else round(G * (sum(lengths) / len(lengths) if lengths else T))
    return _finish(
        a,
        tcfg,
        sizes,
        device=device,
        world=world,
        G=G,
        A=A,
        T=T,
        per_step=per_step,
        n=len(lengths),
        packed=packed,
        shards=layout.TRAIN_SHARDS_WEIGHTS,
    )


def _finish(a, tcfg, sizes, *, device, world, G, A, T, per_step, n, packed, shards) -> dict:
    nbytes = dict(sizes["bytes"], total=sum(sizes["bytes"].values()))
    mem = {k: v / GIB for k, v in nbytes.items()}
    budget = _device_gib(a, device)
    warnings = []
    if budget is not None and mem["total"] > budget:
        warnings.append(
            f"does not fit: {mem['total']:.2f} GiB per rank > {budget:.2f} GiB of device memory; "
            f"shorten {'--total-seq-len' if packed else 'the samples'}, use more ranks"
            f"{' (FSDP shards the weights)' if shards else ''}, or a --draft-vocab-size"
        )
    return {
        "arch": a.draft_arch,
        "target": str(a.target),
        "vocab_size": int(tcfg["vocab_size"]),
        "hidden_size": int(tcfg["hidden_size"]),
        "device": device,
        "world_size": world,
        "global_batch": G,
        "accumulation": A,
        "tokens_per_micro_batch": T,
        "tokens_per_step": per_step,
        "samples": n or None,
        "params": sizes["params"],
        "per_rank_gib": mem,
        "per_rank_bytes": nbytes,
        "device_memory_gib": budget,
        "fits": None if budget is None else mem["total"] <= budget,
        "warnings": warnings,
        "notes": sizes["notes"],
    }


def plan_lines(p: dict) -> list[str]:
    """The plan as the command line prints it."""
    pr, m = p["params"], p["per_rank_gib"]
    lines = [
        f"plan: {p['arch']} draft for {p['target']} (vocab {p['vocab_size']}, hidden {p['hidden_size']}) on "
        f"{p['world_size']} rank(s), {p['device']}",
        f"  parameters: {pr['total']:,} ({pr['trainable']:,} trained, {pr['frozen']:,} frozen)",
        f"  global batch: {p['global_batch']} micro-batches per step ({p['accumulation']} per rank), "
        f"{p['tokens_per_micro_batch']:,} tokens per micro-batch, ~{p['tokens_per_step']:,} tokens per step",
        "  memory per rank: " + ", ".join(f"{k} {_size(v)}" for k, v in m.items()),
    ]
    budget = p["device_memory_gib"]
    lines.append(
        f"  device memory: {_size(budget)}: {'fits' if p['fits'] else 'DOES NOT FIT'}"
        if budget is not None
        else "  device memory: unknown (no CUDA device; --device-memory-gib to check a budget)"
    )
    lines += [f"  note: {x}" for x in p["notes"]]
    lines += [f"WARNING: {w}" for w in p["warnings"]]
    return lines


def _size(gib: float) -> str:
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.2f} MiB"
