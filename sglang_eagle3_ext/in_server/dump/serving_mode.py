"""Dump while serving EAGLE-3: the mode's configuration and its installation on the dump target.

With `--speculative-algorithm EAGLE3` the dump captures exactly the layers the draft is fed (its HF
indices; a different SGLANG_EAGLE3_EXT_DUMP_LAYERS is a start-up error naming both), and, unless
SGLANG_EAGLE3_EXT_DUMP_RESPONSES=0, the response's states come from the TARGET_VERIFY batches
(verify_capture.py) and each finished request is written as one prompt+response sample
(serving_assembler.py). Which requests: SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE (a setting of every dump, see
config.DumpConfig.wanted: a stable hash of the sample id, the same decision on every rank and every restart)
and SGLANG_EAGLE3_EXT_DUMP_MAX_ACCEPT_LEN (only requests whose own accept length is below it: the traffic
where the draft is weakest).
"""

from __future__ import annotations

import dataclasses
import logging

from ... import envs
from ..._log import log_once, logger
from ...draft import layers as draft_layers
from ...dump.config import ENV_LAYERS, ENV_SAMPLE_RATE, DumpConfig, DumpConfigError, layers_shown
from ...server.startup import StartupContext
from . import verify_capture
from .writer.thread import DumpStartupError

ENV_RESPONSES = envs.DUMP_RESPONSES
ENV_MAX_ACCEPT_LEN = envs.DUMP_MAX_ACCEPT_LEN

_targets: list = []  # every DumpTarget of this process (the worker's start-up check reads them)


def forget_targets() -> None:
    _targets.clear()


@dataclasses.dataclass(frozen=True)
class ServingConfig:
    responses: bool = True  # capture verify states and write prompt+response
    responses_explicit: bool = False  # set by the user (an unsupported release is then an error)
    max_accept_len: float | None = None  # None: every request


def serving_config(env=None) -> ServingConfig:
    try:
        responses = envs.get(ENV_RESPONSES, env)
        max_accept_len = envs.get(ENV_MAX_ACCEPT_LEN, env)
    except envs.EnvError as e:
        raise DumpConfigError(str(e)) from None
    return ServingConfig(
        responses=responses, responses_explicit=envs.raw(ENV_RESPONSES, env) is not None, max_accept_len=max_accept_len
    )


def draft_hf_indices(ctx: StartupContext, n: int) -> tuple[list[int] | None, str]:
    """(HF hidden_states indices the EAGLE-3 draft is fed, where that came from); None when the draft's
    config cannot be read here (a hub id): the worker's start-up check then compares what SGLang set."""
    if ctx.draft_config is None:
        return None, f"draft {ctx.draft_path} (config not readable here)"
    from ...versions import capabilities

    layers, why = draft_layers.fed_hf_indices(
        ctx.draft_config, n, capabilities().CAPTURE_ALWAYS_PLUS_ONE, where=f"draft {ctx.draft_path}/config.json"
    )
    return layers, f"{ctx.draft_path}: {why}"


def config_for_target(cfg: DumpConfig, n: int, ctx: StartupContext) -> DumpConfig:
    """The dump config for a target of `n` layers: with EAGLE-3 on, the layers are the draft's."""
    scfg = serving_config()
    if not ctx.eagle3:
        if scfg.max_accept_len is not None:
            raise DumpConfigError(
                f"{ENV_MAX_ACCEPT_LEN} selects requests by their EAGLE-3 accept length: it needs "
                f"--speculative-algorithm EAGLE3 (unset it for a plain dump)"
            )
        return cfg
    layers, where = draft_hf_indices(ctx, n)
    if layers is None:
        return cfg
    if cfg.layers is not None and cfg.resolve_layers(n) != layers:
        raise DumpConfigError(
            f"{ENV_LAYERS}={layers_shown(cfg.layers)} but the EAGLE-3 draft is fed HF hidden_states "
            f"{layers} ({where}); while serving EAGLE-3 the dump captures exactly the draft's layers: unset "
            f"{ENV_LAYERS} (or set it to {','.join(map(str, layers))})"
        )
    if cfg.layers is None:
        log_once(
            "dump.serving_layers",
            "dump while serving EAGLE-3: capturing the draft's HF hidden_states %s (%s)",
            layers,
            where,
        )
    return dataclasses.replace(cfg, layers=tuple(layers))


def _responses_supported() -> str | None:
    """Why this release cannot capture responses (None: it can)."""
    from ...versions import capabilities

    caps = capabilities()
    if not (caps.SPEC_V2_VERIFY_SCHEDULE_BATCH and caps.HAS_OUTPUT_STREAMER):
        return f"SGLang {caps.version} has no EAGLEWorkerV2.verify(ScheduleBatch) / SchedulerOutputStreamer (0.5.14+)"
    return None


def install(target, model, ctx: StartupContext):
    """Called by start.attach after the DumpTarget exists. With EAGLE-3 on and responses wanted, wires the
    verify capture and the serving assembler into the writer. Returns the VerifyCapture (None: prompts only,
    written at prefill)."""
    _targets.append(target)
    scfg = serving_config()
    w = target.writer
    if target.cfg.sample_rate < 1.0:
        log_once(
            "dump.sample_rate",
            "dump: writing a %g share of the requests (%s; a hash of the request id, the "
            "same on every rank and re-run)",
            target.cfg.sample_rate,
            ENV_SAMPLE_RATE,
        )
    if not (ctx.eagle3 and scfg.responses):
        return None
    why = _responses_supported()
    if why is None and target.cfg.writer != "thread":
        why = "the response stitching runs in the server's writer thread (SGLANG_EAGLE3_EXT_DUMP_WRITER=thread)"
    if why is not None:
        if scfg.responses_explicit:
            raise DumpConfigError(f"{ENV_RESPONSES}=1: {why}")
        log_once(
            "dump.serving_prompts_only",
            "dump while serving EAGLE-3: prompts only (%s; set %s=0 to silence)",
            why,
            ENV_RESPONSES,
            level=logging.WARNING,
        )
        return None
    topk = getattr(ctx.server_args, "speculative_eagle_topk", None)
    if topk is not None and int(topk) > 1:
        raise DumpConfigError(
            f"dump while serving EAGLE-3 captures response states of chain drafts only: "
            f"--speculative-eagle-topk {topk} compacts tree paths after the verify; use topk 1, "
            f"or set {ENV_RESPONSES}=0 to dump prompts only"
        )

    vc = verify_capture.VerifyCapture(target, scfg)
    target.verify = vc
    if w is not None:
        from .serving_assembler import ServingAssembler

        w.use_assembler(ServingAssembler(w, scfg, vc))
        verify_capture.set_active(vc)
    logger.info(
        "dump while serving EAGLE-3: response states from TARGET_VERIFY, one prompt+response sample per "
        "finished request (sample rate %g, accept length below %s)",
        target.cfg.sample_rate,
        scfg.max_accept_len if scfg.max_accept_len is not None else "any",
    )
    return vc


def check_worker(worker) -> None:
    """EAGLEWorkerV2.__init__ finished (the target's layers are set, its graphs captured): the target must
    capture exactly the dump's layers, and response capture needs a chain (topk 1). Start-up errors."""

    for t in list(_targets):
        model = t.model_ref()
        if model is None:
            continue
        now = list(getattr(model.model, "layers_to_capture", []) or [])
        if now != list(t.layers):
            raise DumpStartupError(
                f"sglang_eagle3_ext dump: SGLang set the EAGLE-3 target to capture HF hidden_states {now} for the "
                f"draft, but the dump captures {list(t.layers)} ({ENV_LAYERS}); while serving EAGLE-3 both must be "
                f"the draft's layers: set {ENV_LAYERS}={','.join(map(str, now))} or record the draft's indices "
                f"with `python -m sglang_eagle3_ext.convert`"
            )
        vc = getattr(t, "verify", None)
        topk = int(getattr(worker, "topk", 1) or 1)
        if vc is not None and topk > 1:
            raise DumpStartupError(
                f"sglang_eagle3_ext dump: response capture needs --speculative-eagle-topk 1 "
                f"(got {topk}); or set {ENV_RESPONSES}=0"
            )
