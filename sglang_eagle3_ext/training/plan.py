"""`train --dry-run`: what a run would take, per rank, before anything is trained. Reads the target's config.json
only (no weights) and --data's sample headers when given; builds and runs nothing, so it answers at once for any
size (training/<route>/plan.py: the arithmetic of each route, training/plan_models.py: what they share).

It refuses what the run would refuse before its first step: the settings each route checks (the same functions),
the global batch over the ranks, and, with --data, samples whose headers do not hold the token ids and the
states [L, K+1, hidden] the run reads. Per rank: the weights (float32 masters; with FSDP, the Llama route's,
sharded over the ranks plus the module being gathered), the gradients and the optimizer's state (AdamW: two
float32 values per trainable weight; sharded like the weights), and the activation peak of one micro-batch at
the plan's length: --total-seq-len tokens for the Llama route (speculators pads every packed sequence to it), the
longest sample of --data for the MLA route (else --total-seq-len). A warning when the total passes the device's
memory (or --device-memory-gib). The time: the work per token at the route's measured rate, per step and, with
--data, for the whole run.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..boundary import BadInput
from ..draft import arch as layouts
from . import sharding
from .data import find_hs_dir, list_hs_files, parse_layer_ids, read_layer_ids_from_metadata
from .distributed import torchrun_env
from .options import DEFAULT_EPOCHS, TrainOptions
from .report import TrainDraftError
from .routes import plan_step
from .samples import SampleSpec, header_length
from .target_view import text_config

GIB = 2**30
# what a plan that does not fit or whose config does not make a draft can raise (shapes, a division, a missing key)
_CONFIG_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError)


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


def _layer_ids(a: TrainOptions) -> TrainOptions:
    """`a` with the aux layers --data's metadata names when --layer-ids is left out (the routes' own default
    otherwise)."""
    if parse_layer_ids(a.layer_ids) is None and a.data is not None:
        ids, _ = read_layer_ids_from_metadata(Path(a.data))
        if ids is not None:
            return dataclasses.replace(a, layer_ids=ids)
    return a


def _default_count(layout, a: TrainOptions, n_layers: int) -> int:
    """K when neither --layer-ids nor --data's metadata names the aux layers: the layout's own default."""
    try:
        return len(layout.default_aux_layers(n_layers, a.num_layers))
    except ValueError as e:
        raise TrainDraftError(f"--num-layers {a.num_layers}: {e}; pass --layer-ids") from None


def _lengths(a: TrainOptions, K: int, tcfg: dict) -> list[int] | None:
    """The samples' lengths from their headers (None without --data); a header that is not a sample's is refused
    by name, as the run refuses the file (training/samples.py)."""
    if a.data is None:
        return None
    spec = SampleSpec(K + 1, int(tcfg["hidden_size"]), int(tcfg["vocab_size"]), f"{K} aux layers + the final state")
    return [header_length(p, spec) for p in list_hs_files(find_hs_dir(Path(a.data)))]


def _device(a: TrainOptions) -> str:
    if a.device is not None:
        return a.device
    import torch  # only to find the default device

    return "cuda" if torch.cuda.is_available() else "cpu"


def _device_gib(a: TrainOptions, device: str) -> float | None:
    if a.device_memory_gib is not None:
        return float(a.device_memory_gib)
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / GIB
    return None


def plan_draft(a: TrainOptions) -> dict:
    """The plan of the run `a` describes (nothing is built, trained or written)."""
    tcfg = _target_config(a)
    world = _world_size(a)
    G, A = sharding.accumulation(a.global_batch, world)
    a = _layer_ids(a)
    ids = parse_layer_ids(a.layer_ids)
    layout = layouts.get(a.draft_arch)
    K = len(ids) if ids else _default_count(layout, a, int(tcfg["num_hidden_layers"]))
    lengths = _lengths(a, K, tcfg)
    packed = layout.TRAIN_PADS_TO_TOTAL_SEQ_LEN
    T = a.total_seq_len if packed or not lengths else max(lengths)
    device = _device(a)
    try:
        sizes = plan_step(layout)(a, tcfg, K, T, device, world, lengths=lengths)
    except TrainDraftError:
        raise
    except _CONFIG_ERRORS as e:  # the config's sizes do not make a draft (a head size that does not divide...)
        raise TrainDraftError(
            f"--target {a.target}: its config.json does not describe a {a.draft_arch} draft "
            f"({type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]})"
        ) from None
    per_step = G * T if packed else round(G * (sum(lengths) / len(lengths) if lengths else T))
    steps = _steps(a, lengths, G, T, packed, layout)
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
        n=len(lengths or ()),
        steps=steps,
        packed=packed,
        shards=layout.TRAIN_SHARDS_WEIGHTS,
    )


def _steps(a: TrainOptions, lengths, G: int, T: int, packed: bool, layout) -> int | None:
    """Optimizer steps of the whole run (None without --data): an epoch of the training split, packed into
    sequences of T tokens or one sample a micro-batch, in steps of G."""
    if a.steps is not None and a.epochs is None:
        return a.steps
    if not lengths:
        return None
    n_train = layout.heldout(len(lengths), a.train_ratio)[0]
    micro = math.ceil(sum(lengths[:n_train]) / T) if packed else n_train
    per_epoch = max(1, math.ceil(micro / G))
    total = (a.epochs or DEFAULT_EPOCHS) * per_epoch
    return min(total, a.steps) if a.steps is not None else total


def _finish(a, tcfg, sizes, *, device, world, G, A, T, per_step, n, steps, packed, shards) -> dict:
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
    step_s = per_step * sizes["flops_per_token"] / (sizes["tflops"] * 1e12 * world)
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
        "time": {
            "flops_per_token": sizes["flops_per_token"],
            "tflops_per_rank": sizes["tflops"],
            "step_s": step_s,
            "steps": steps,
            "run_s": None if steps is None else step_s * steps,
        },
        "warnings": warnings,
        "notes": sizes["notes"],
    }


def plan_lines(p: dict) -> list[str]:
    """The plan as the command line prints it."""
    pr, m, t = p["params"], p["per_rank_gib"], p["time"]
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
    run = f", ~{_duration(t['run_s'])} for {t['steps']:,} steps" if t["steps"] is not None else "; the run: with --data"
    lines.append(
        f"  time: ~{_duration(t['step_s'])} per step at {t['tflops_per_rank']:.3g} TFLOP/s per rank "
        f"({t['flops_per_token'] / 1e9:,.1f} GFLOP per token){run}"
    )
    lines += [f"  note: {x}" for x in p["notes"]]
    lines += [f"WARNING: {w}" for w in p["warnings"]]
    return lines


def _size(gib: float) -> str:
    return f"{gib:.2f} GiB" if gib >= 1 else f"{gib * 1024:.2f} MiB"


def _duration(s: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s / n:,.1f} {unit}"
    return f"{s:.3g} s"
