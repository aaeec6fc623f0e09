"""Which process of a TP/DP/PP layout writes the dump: the parallel layout read from SGLang's own state.

The layer input is replicated across the attention-TP group, so exactly one rank of it (rank 0) writes;
with DP attention each DP group holds other requests and has its own writer. The probe fails closed:
an attention-TP rank that cannot be read is None, and None never writes (defaulting it to 0 would make
every rank write the same samples into one manifest), unless this process is alone in its world.
"""

from __future__ import annotations


def is_writer(ranks: dict) -> bool:
    """The layer input is replicated across the attention-TP group: its rank 0 writes. With DP attention
    every DP group holds other requests, so each group has its own writer (attention-TP rank 0 there).
    Fails closed: a rank that could not be read (None) never writes (else every rank would)."""
    return ranks.get("attn_tp_rank") == 0


def _single_process() -> bool:
    """No torch.distributed world, or a world of one: this process is rank 0 of everything."""
    try:
        import torch.distributed as dist

        return not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1
    except Exception:  # noqa: BLE001 - cannot tell: not known to be alone
        return False


def rank_info() -> dict:
    """Parallel layout of this process; every field best-effort (missing -> default), except the
    attention-TP rank, which decides who writes: unknown there is None unless the process is alone."""
    out = _probe_ranks()
    if out["attn_tp_rank"] is None and _single_process():
        out["attn_tp_rank"] = 0
    return out


def _probe_ranks() -> dict:
    out = dict(tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=None, dp_size=1, dp_rank=0, pp_size=1, pp_rank=0)
    try:
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        for k, attr in (
            ("tp_size", "tp_size"),
            ("tp_rank", "tp_rank"),
            ("attn_tp_size", "attn_tp_size"),
            ("attn_tp_rank", "attn_tp_rank"),
            ("dp_size", "attn_dp_size"),
            ("dp_rank", "attn_dp_rank"),
            ("pp_size", "pp_size"),
            ("pp_rank", "pp_rank"),
        ):
            try:
                out[k] = int(getattr(par, attr))
            except Exception:  # noqa: BLE001 - not initialised in this layout
                pass
        return out
    except ImportError:
        pass
    try:
        from sglang.srt.distributed import parallel_state as ps
        from sglang.srt.layers import dp_attention as dpa

        for k, fn in (
            ("attn_tp_size", "get_attention_tp_size"),
            ("attn_tp_rank", "get_attention_tp_rank"),
            ("dp_size", "get_attention_dp_size"),
            ("dp_rank", "get_attention_dp_rank"),
        ):
            try:
                out[k] = int(getattr(dpa, fn)())
            except Exception:  # noqa: BLE001
                pass
        for k, fn in (
            ("tp_size", "get_tensor_model_parallel_world_size"),
            ("tp_rank", "get_tensor_model_parallel_rank"),
            ("pp_size", "get_pipeline_model_parallel_world_size"),
            ("pp_rank", "get_pipeline_model_parallel_rank"),
        ):
            try:
                out[k] = int(getattr(ps, fn)())
            except Exception:  # noqa: BLE001
                pass
    except ImportError:
        pass
    return out
