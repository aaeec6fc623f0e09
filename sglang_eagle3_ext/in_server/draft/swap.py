"""A new EAGLE-3 draft in a running SGLang server without a restart: the server side of `sglang-eagle3 swap`.

The request rides SGLang's own weight update route: POST /update_weights_from_disk with `model_path` = the new
draft's folder and `load_format` = LOAD_FORMAT. The tokenizer manager lets the requests in flight finish and
holds new ones back (its model-update lock), then the scheduler of every TP rank handles the request between
batches; there in_server/hooks/weight_updater.py hands it to `handle` instead of SGLang's reload of the target.

`handle`, on every TP rank:
1. judges the new draft before anything changes: the start-up rules (`check_draft`: files, config, every
   tensor's shape, d2t, every value finite; against the target), and what a swap adds (draft/swap/rules.py: built as
   the served draft, fed the HF indices the target captures now; every config key SGLang's draft class reads,
   draft/swap/keys.py: the rotary's, the norms', set as the served draft's, since the modules built from them at
   start-up stay and a swap loads weights only);
2. keeps a host copy of the draft's tensors, loads the new draft into them through the strict loader (the
   release's own weight loaders: each rank its TP shard), in place (swap_tensors.py says why in place);
3. agrees with every TP rank: one failure anywhere puts the copy back everywhere. Until then, and after any
   failure, the old draft serves; the reply says why (success false).
On success the prefix cache is flushed (the draft's KV of cached prefixes was computed by the old draft), and the
tokenizer manager records the new draft as SGLang's speculative_draft_model_path (in_server/hooks/tokenizer_manager.py).
Each scheduler reports its last attempt (path, outcome) in /get_server_info, so a client whose reply was lost
(its timeout) reads what happened.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ..._log import logger
from ...boundary import read_json_file
from ...draft import arch as layouts
from ...draft import errors as E
from ...draft import keys, rules
from ...draft.check import check_draft
from ...draft.errors import DraftLoadError, Problem
from ...draft.safetensors_io import weight_files
from ...draft.swap.keys import build_keys
from ...draft.swap.protocol import LOAD_FORMAT, PROTOCOL, STATE_KEY
from ...draft.swap.rules import against_served, problems_line, summary
from ...patching import PATCH_MARK
from ...server.startup import startup_context
from .loader import load_accounted, served_config
from .swap_tensors import TensorState, captured_layers, find_draft, sync

_served: dict = {}  # this process's served draft: path, raw config, swaps done, attempts


@dataclasses.dataclass
class Plan:
    """A new draft judged fit: what the load needs."""

    path: Path
    spec: object
    cfg: dict
    layout: object
    has_d2t: bool
    target: tuple


def served_draft() -> dict:
    """The draft this process serves: the start-up one until a swap replaced it."""
    if not _served:
        from ...server.startup import startup_context

        ctx = startup_context()
        _served.update(path=ctx.draft_path, config=ctx.draft_config, swaps=0, last=None, attempts=0, attempt=None)
    return _served


def handle(manager, req):
    """SchedulerWeightUpdaterManager.update_weights_from_disk(req) for LOAD_FORMAT: SGLang's reply object."""
    from sglang.srt.managers.io_struct import UpdateWeightFromDiskReqOutput

    ok, message = swap_draft(manager, str(req.model_path), flush=bool(getattr(req, "flush_cache", True)))
    return UpdateWeightFromDiskReqOutput(success=ok, message=message, num_paused_requests=0)


def swap_draft(manager, path: str, flush: bool = True) -> tuple[bool, str]:
    """(success, message) of swapping the draft of `manager`'s scheduler for the draft in `path`. Never raises:
    whatever fails, the served draft is the old one and the message says why."""
    from .swap_tensors import agree

    t0, old, state = time.perf_counter(), None, None
    try:
        old = served_draft()["path"]
        state, plan = _prepare(manager, path)
        if state is None:
            ok, message = False, plan  # the refusal
        else:
            ok = _load(state, plan)
            message = "" if ok else state.failure
    except Exception as e:  # noqa: BLE001 - never into the scheduler's loop: the old draft keeps serving
        logger.exception("EAGLE-3 draft swap failed")
        message = f"draft {path} not swapped in: unexpected {type(e).__name__}: {e} (the served draft is unchanged)"
        ok = _undo(state)
    try:
        agreed, message = agree(getattr(manager, "tp_cpu_group", None), ok, message)
    except Exception as e:  # noqa: BLE001
        agreed, message = False, f"draft {path} not swapped in: the TP ranks could not agree ({e})"
    if ok and not agreed:
        _undo(state)
    if agreed:
        try:
            message = _commit(manager, path, old, time.perf_counter() - t0, flush)
        except Exception as e:  # noqa: BLE001 - the new draft serves; only the bookkeeping failed
            message = f"draft {path} swapped in (was {old}); afterwards: {type(e).__name__}: {e}"
    _note_attempt(path, agreed, message)
    logger.info("EAGLE-3 draft swap: %s", message)
    return agreed, message


def _note_attempt(path: str, ok: bool, message: str) -> None:
    """Remember the last swap this scheduler handled (a client whose reply was lost reads the outcome from
    /get_server_info)."""
    try:
        s = served_draft()
        s["attempts"] = s.get("attempts", 0) + 1
        s["attempt"] = {"path": path, "ok": bool(ok), "message": message[:4000]}
    except Exception as e:  # noqa: BLE001 - bookkeeping only
        logger.info("EAGLE-3 draft swap: the attempt is not recorded (%s: %s)", type(e).__name__, e)


def _prepare(manager, path: str):
    """(the tensors a load will write, the judged plan), or (None, why not) when the draft is refused."""

    side = find_draft(manager)
    if isinstance(side, str):
        return None, f"draft {path} not swapped in: {side}"
    problems, plan = judge(side, path)
    if problems:
        return None, _refusal(path, problems)
    return TensorState(side), plan


def _undo(state) -> bool:
    """Put the old draft back when anything was written; False (the swap did not happen)."""
    if state is not None and state.saved is not None:
        state.restore()
    return False


def _refusal(path: str, problems) -> str:

    return f"draft {path} refused, the served draft is unchanged: {problems_line(problems)}"


def judge(side, path: str) -> tuple[list[Problem], Plan | None]:
    """Everything decidable before a tensor is written: the start-up rules and what a swap adds."""

    d = Path(path)
    if not d.is_absolute() or not d.is_dir():
        return [
            Problem(
                E.CONFIG_MISSING,
                f"{path}: no such folder here (the server reads it: give an absolute path on the server's machine)",
            )
        ], None
    ctx = startup_context()
    rep = check_draft(d, target=ctx.target_dir if ctx.target_config is not None else None, scan_values=True)
    # the start-up loader casts into the served dtype, whatever the files declare
    problems = [p for p in rep.errors if p.code != E.DTYPE]
    if problems:
        return problems, None
    layout = keys.installed_layout()
    cfg = read_json_file(d / "config.json", "draft config")
    spec, _ = rules.spec_from_config(cfg, layout, where=str(d / "config.json"))
    has_d2t = any(keys.canonical(name)[0] == "d2t" for name in rep.loads)
    problems = served_problems(side, cfg, spec, layout, has_d2t, str(d))
    return problems, Plan(
        d, spec, cfg, layout, has_d2t, (ctx.target_dir if ctx.target_config else None, ctx.target_config)
    )


def served_summary(side, layout) -> dict:
    """What the served draft is built as, and what the target captures for it (also /get_server_info's report)."""

    # the served draft's config.json as read at start-up (or at the last swap): judged in the same form as the
    # new draft's; the built model's config only when the file is not readable here (transformers rewrites some
    # fields on load, e.g. an MLA config's head_dim)
    cfg = served_draft()["config"]
    spec = rules.spec_from_config(cfg, layout)[0] if cfg is not None else None
    if spec is None:
        spec, _ = rules.spec_from_config(served_config(side.models[0]), layout)
    captured, n_layers = captured_layers(side.target)
    has_map = bool(side.holders) or getattr(side.models[0], "hot_token_id", None) is not None
    return {
        **summary(spec, cfg, build_keys(layouts.get(spec.layout))),
        "hf_indices": captured,
        "target_layers": n_layers,
        "token_map": has_map,
    }


def served_problems(side, cfg: dict, spec, layout, has_d2t: bool, where: str) -> list[Problem]:
    """The new draft against the served one: built alike, fed what the target captures, its token map."""

    served = served_summary(side, layout)
    if served["hf_indices"] is None or served["target_layers"] is None:
        logger.info("EAGLE-3 draft swap: the target's captured layers are not readable here; HF indices not compared")
    return against_served(cfg, spec, served, layout.capture_always_plus_one, has_d2t, where)


def _load(state, plan: Plan) -> bool:
    """Load `plan` into every draft model in place; on any failure the old draft is put back and
    `state.failure` says why."""
    import functools

    import torch

    side = state.side
    sync(side)  # a forward still reading the old draft finishes first
    state.save()
    try:
        with torch.no_grad():
            for model in side.models:
                fn = type(model).load_weights  # the release's own, past our strict wrapper (its pre-load
                release = functools.partial(fn.__wrapped__ if getattr(fn, PATCH_MARK, None) else fn, model)  # rules
                skip = state.skip_names(model)  # read the served draft's folder; judge() read the new one)
                load_accounted(
                    lambda feed, r=release, s=skip: r(_unshared(feed, s)),
                    model,
                    _weights(plan.path),
                    plan.spec,
                    plan.layout,
                    str(plan.path),
                    plan.target,
                )
            bad = state.rebind()
            if bad:
                raise DraftLoadError(
                    [Problem(E.SWAP_MISMATCH, f"{plan.path}: {b}") for b in bad],
                    "the new draft's tensors do not fit the served ones:",
                )
            state.update_maps(side.models[0], identity=not plan.has_d2t)
        sync(side)
    except Exception as e:  # noqa: BLE001 - the strict loader's refusal, or anything the release raised
        state.restore()
        text = "; ".join(str(p) for p in e.problems) if isinstance(e, DraftLoadError) else f"{type(e).__name__}: {e}"
        state.failure = f"draft {plan.path} refused while loading, the served draft is put back: {text}"
        return False
    return True


def _unshared(feed, skip: frozenset):
    """The loader's feed without the tensors that would land in parameters the target owns (its embeddings)."""
    for name, tensor in feed:
        if name not in skip and f"model.{name}" not in skip:
            yield name, tensor


def _weights(path: Path):
    """(name, tensor) of the draft's safetensors files, read by SGLang's own iterator as its model loader does."""
    from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator

    files, _ = weight_files(path)
    return safetensors_weights_iterator([str(f) for f in files])


def _commit(manager, path: str, old, seconds: float, flush: bool) -> str:
    """The new draft serves: remember it, flush the prefix cache; the reply's message."""

    s = served_draft()
    s.update(
        path=path,
        config=read_json_file(Path(path) / "config.json", "draft config"),
        swaps=s["swaps"] + 1,
        last={"from": old, "seconds": round(seconds, 3)},
    )
    note = ""
    if flush:
        try:
            flushed = manager.flush_cache(empty_cache=False)
        except Exception as e:  # noqa: BLE001 - the swap is done; a stale cache only costs acceptance
            flushed, note = False, f" ({type(e).__name__}: {e})"
        if not flushed:
            note = (
                f"; the prefix cache was not flushed{note}: cached prefixes keep the old draft's KV until "
                f"evicted (lower acceptance on them, outputs unchanged)"
            )
    return f"draft {path} swapped in (was {old}) in {seconds:.2f} s on this rank{note}"


def state_report(scheduler) -> dict | None:
    """The entry this scheduler adds to /get_server_info's internal state: the served draft, what it is built as
    and what the target captures (what `swap` checks a new draft against before sending it)."""

    side = find_draft(getattr(scheduler, "weight_updater", None) or scheduler)
    if isinstance(side, str):
        return {"protocol": PROTOCOL, "draft": None, "refusal": side}
    s = served_draft()
    return {
        "protocol": PROTOCOL,
        "draft": s["path"],
        "swaps": s["swaps"],
        "last_swap": s["last"],
        "attempts": s.get("attempts", 0),
        "last_attempt": s.get("attempt"),
        "load_format": LOAD_FORMAT,
        **served_summary(side, keys.installed_layout()),
    }


def add_state_report(scheduler, reply) -> None:
    """Add state_report to SGLang's GetInternalStateReqOutput (never raises: /get_server_info keeps working)."""
    state = getattr(reply, "internal_state", None)
    if not isinstance(state, dict):
        return
    try:
        state[STATE_KEY] = state_report(scheduler)
    except Exception as e:  # noqa: BLE001
        from ..._log import log_once

        log_once(
            "swap-state-report", "EAGLE-3 draft swap: no draft report in /get_server_info (%s: %s)", type(e).__name__, e
        )
