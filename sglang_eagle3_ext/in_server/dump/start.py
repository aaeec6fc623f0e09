"""Start-up of the dump in a target model's process: after DeepseekV2ForCausalLM.__init__, switch aux capture
on at the configured layers, build the dump's metadata and start this process's writer (one per DP group's
attention-TP rank 0), then hand the model to capture.DumpTarget."""

from __future__ import annotations

import logging
import os

from ... import __version__
from ..._log import log_once, logger
from ...boundary import BadInput
from ...dump.config import CONVENTION, DumpConfig, DumpConfigError, from_env
from ...server.startup import StartupContext, startup_context
from ...versions import capabilities, layer0_refusal
from ..draft.capture_layers import aux_capture_refusal
from . import serving_mode, verify_capture
from .capture import ATTR, TARGET_CLASSES, DumpTarget
from .prefill_graphs import check as refuse_prefill_graphs
from .ranks import is_writer, rank_info
from .staging import ring_for
from .writer.thread import DumpStartupError, DumpWriter

_writer = None  # one per process (one DP group's attention-TP rank 0)


def reset() -> None:
    """Forget this process's dump: its writer, its dump targets and its verify capture (the next attach starts
    afresh; a process that loads a second model, and the tests, need that)."""
    global _writer

    _writer = None
    serving_mode.forget_targets()
    verify_capture.set_active(None)


def build_meta(model, cfg: DumpConfig, layers: list[int], ranks: dict, ctx: StartupContext) -> dict:
    from ...versions import installed_version

    config = model.config
    sa = ctx.server_args
    dtype = None
    try:
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    except Exception:  # noqa: BLE001
        pass
    return {
        "format": "sge3_dump",
        "format_version": 1,
        "layer_indices_hf": list(layers),
        "layer_convention": CONVENTION,
        "final": cfg.final,
        "final_states": {
            "final_prenorm": "output of the last decoder layer before model.norm "
            "(speculators' last hidden_states slot)",
            "final_postnorm": "after model.norm = HF hidden_states[n] (SpecForge hidden_state)",
        },
        "hidden_size": int(config.hidden_size),
        "num_hidden_layers": int(config.num_hidden_layers),
        # token ids must lie in [0, vocab_size): the writer and export refuse samples that hold others
        "vocab_size": int(config.vocab_size) if getattr(config, "vocab_size", None) else None,
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "model_class": type(model).__name__,
        "model_path": getattr(sa, "model_path", None),
        "served_model_name": getattr(sa, "served_model_name", None),
        "dtype": dtype or str(getattr(sa, "dtype", "")),
        "sglang_version": installed_version(),
        "ext_version": __version__,
        "tp_size": ranks["tp_size"],
        "dp_size": ranks["dp_size"],
        "attn_tp_size": ranks["attn_tp_size"],
        "pp_size": ranks["pp_size"],
        "chunked_prefill_size": getattr(sa, "chunked_prefill_size", None),
        "disable_radix_cache": getattr(sa, "disable_radix_cache", None),
    }


def make_writer(cfg: DumpConfig, meta: dict, name: str, cuda: bool = False):
    """In this process (io threads) or in a child process (SGLANG_EAGLE3_EXT_DUMP_WRITER=process), with the
    staging ring the capture copies into (writer.staging); cuda: the model runs on a GPU (pinned memory)."""
    if cfg.writer == "process":
        from .writer.process import ProcessDumpWriter

        return ProcessDumpWriter(cfg, meta, name=name, pin=cuda)

    return DumpWriter(cfg, meta, name=name, staging=ring_for(cfg) if cuda else None)


def get_writer():
    return _writer


def refuse_unsupported(sa) -> None:
    """Start-up errors (DumpConfigError) where the server would run the target so that the dump cannot read
    its states: prefill inside CUDA graphs, two-batch overlap."""

    refuse_prefill_graphs(sa)
    why = aux_capture_refusal(sa, "the dump")
    if why:
        raise DumpConfigError(why)


def attach(model, cfg: DumpConfig | None = None) -> "DumpTarget | None":
    """Turn capture on for `model` (called right after its __init__) and start this process's writer.
    Raises DumpConfigError/DumpStartupError; the patch wrapper logs and disables."""
    global _writer
    if type(model).__name__ not in TARGET_CLASSES:
        return None
    cfg = cfg or from_env()
    if cfg is None:
        return None
    ctx = startup_context()
    sa = ctx.server_args
    refuse_unsupported(sa)
    n = int(model.config.num_hidden_layers)

    cfg = serving_mode.config_for_target(cfg, n, ctx)
    layers = cfg.resolve_layers(n, layer0_refusal(), capabilities)  # LAYOUT:N asks whether the release serves it
    ranks = rank_info()
    if ranks["pp_rank"] != ranks["pp_size"] - 1:
        log_once("dump.pp", "dump: pipeline rank %d is not the last: no capture here", ranks["pp_rank"])
        return None
    # Set the two attributes ourselves: set_eagle3_layers_to_capture adds +1 by a release-specific rule.
    model.capture_aux_hidden_states = True
    model.model.layers_to_capture = list(layers)
    writes = is_writer(ranks)
    if ranks["attn_tp_rank"] is None:
        logger.error(
            "dump: could not read this process's attention-TP rank (SGLang's parallel state): NOT writing "
            "from it (only a rank known to be 0 writes; else every rank would write the same samples)"
        )
    if writes and _writer is None:
        meta = build_meta(model, cfg, layers, ranks, ctx)
        first = next(model.parameters(), None)
        _writer = make_writer(cfg, meta, name=f"dp{ranks['dp_rank']}", cuda=first is not None and first.is_cuda)
        if sa is not None and not getattr(sa, "disable_radix_cache", False):
            log_once(
                "dump.radix",
                "dump: the radix cache is on: requests whose prompt head is cached are refused "
                "(launch with --disable-radix-cache to dump every request)",
                level=logging.WARNING,
            )
    target = DumpTarget(model, cfg, layers, _writer if writes else None)
    serving_mode.install(target, model, ctx)  # sampling rate; EAGLE-3: verify capture
    setattr(model.logits_processor, ATTR, target)  # last: an error above leaves no half-attached dump
    logger.info(
        "dump: capturing HF hidden_states %s + final (%s) of %s; %s",
        layers,
        cfg.final,
        type(model).__name__,
        f"writing to {cfg.dump_dir}" if writes else "not the writer rank",
    )
    return target


def install_from_init(instance) -> None:
    """Called by in_server/hooks/deepseek_v2.py after DeepseekV2ForCausalLM.__init__.

    The user asked for a dump: a bad configuration (missing/unwritable dir, layer out of range, a
    dump dir made with other settings) stops the server at start-up with the fix in the message,
    rather than serving for hours and writing nothing; so does a dump dir whose files (manifest, settings) are
    not what they must be. Anything unexpected only disables dumping.
    """

    try:
        attach(instance)
    except (DumpConfigError, DumpStartupError, BadInput) as e:
        raise DumpStartupError(f"sglang_eagle3_ext dump: {e}") from e
    except Exception as e:  # noqa: BLE001 - not a user error: keep serving without the dump
        logger.error("dump: DISABLED in this process (pid %d): %s: %s", os.getpid(), type(e).__name__, e)
