"""The dump and prefill CUDA graphs: refuse at start-up where the release would prefill inside a graph.

Under a captured prefill graph the target's layers replay without Python: the final norm's forward hook
never fires (no pre-norm final state: every batch would be skipped, i.e. silently nothing), and the states
handed to the logits processor are the graph's static output buffers, which the next replay overwrites
while the side-stream copy may still be reading them (garbage). Under `tc_piecewise` the logits processor
itself is compiled into the graph (0.5.14+ captures the outer forward): no hook runs at all. So the dump
starts only where prefill is eager, and otherwise stops the server naming the flag.

What each release resolves (read from the resolved ServerArgs object -- what it has, not its version):
- 0.5.14+: `cuda_graph_config.prefill.backend` in {breakable, tc_piecewise, full} or `disabled`. Defaults:
  0.5.14 tc_piecewise (kept for DeepSeek-V3/Kimi: not on its model blacklist); 0.5.16 breakable on CUDA,
  switched off by its own rule for MLA targets (DeepSeek-V3, Kimi) -- refused there only when the user
  asked for a prefill backend. `--cuda-graph-backend-prefill disabled` wins over every flag but a prefill
  entry in `--cuda-graph-config` (`--disable-prefill-cuda-graph` loses to an explicit backend).
- 0.5.10 (before cuda_graph_config): `disable_piecewise_cuda_graph` (False after resolution = torch.compile
  piecewise prefill, the default for DeepSeek-V3 on CUDA; `--disable-cuda-graph` does not turn it off: the
  model runner reads only this field) -- `--disable-piecewise-cuda-graph`, and drop
  `--enforce-piecewise-cuda-graph`.
An EAGLE target on tc_piecewise/full is not refused: SGLang skips that capture at run time (0.5.14+). It may also
skip an auto-selected one with < 4 GiB free: the refusal then errs on the safe side.
"""

from __future__ import annotations

DISABLED = "disabled"
FIX_NEW = "--cuda-graph-backend-prefill disabled"
FIX_OLD = "--disable-piecewise-cuda-graph"


def prefill_graph_backend(sa) -> str | None:
    """The prefill CUDA-graph backend the resolved server args `sa` capture with; None when prefill is eager
    (or `sa` is unknown: nothing to refuse on)."""
    if sa is None or not str(getattr(sa, "device", None) or "cuda").startswith("cuda"):
        return None  # CUDA graphs are captured on CUDA devices only (a CPU run resolves them but never captures)
    cfg = getattr(sa, "cuda_graph_config", None)
    if cfg is not None:
        prefill = cfg.get("prefill") if isinstance(cfg, dict) else getattr(cfg, "prefill", None)
        backend = prefill.get("backend") if isinstance(prefill, dict) else getattr(prefill, "backend", None)
        backend = str(getattr(backend, "value", backend) or DISABLED)
        if backend in ("tc_piecewise", "full") and _eagle_target_skips(sa):
            return None
        return None if backend == DISABLED else backend
    if hasattr(sa, "disable_piecewise_cuda_graph"):
        return None if sa.disable_piecewise_cuda_graph else "piecewise"
    if getattr(sa, "enable_piecewise_cuda_graph", False):
        return "piecewise"
    return None


def _eagle_target_skips(sa) -> bool:
    """0.5.14+ (capture_prefill_graph, every release since): an EAGLE target captures prefill graphs only with
    the breakable backend (tc_piecewise/full would record the wrong hidden-state mode), unless
    --enable-return-hidden-states."""
    algo = str(getattr(sa, "speculative_algorithm", None) or "").upper()
    return algo in ("EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP") and not getattr(
        sa, "enable_return_hidden_states", False
    )


def refusal(sa) -> str | None:
    """None when the dump can run under `sa`; else the one-line reason with the flag that fixes it."""
    backend = prefill_graph_backend(sa)
    if backend is None:
        return None
    fix = FIX_NEW if hasattr(sa, "cuda_graph_config") else f"{FIX_OLD} (and drop --enforce-piecewise-cuda-graph)"
    return (
        f"SGLang would run prefill inside CUDA graphs here (prefill backend {backend!r}), where the dump "
        f"cannot read the states (the graph replays without the hooks, into buffers the next replay "
        f"overwrites): launch with {fix}; decode CUDA graphs stay on"
    )


def check(sa) -> None:
    """Raise DumpConfigError (the server stops at start-up with the message) where `refusal` says so."""
    msg = refusal(sa)
    if msg:
        from ...dump.config import DumpConfigError

        raise DumpConfigError(msg)
