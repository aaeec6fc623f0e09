"""Starting what a plan describes: first what can still refuse cheaply (the dump folder, the all-reduce
preflight, the built-in tiny model), then SGLang's own launcher in this process."""

from __future__ import annotations

import os
import sys

from .. import envs
from .._activate import apply
from . import nccl
from .dump_dir import make
from .errors import LaunchError
from .plan import LAUNCH_MODULE, Plan


def prepare(plan: Plan, child_env: dict, preflight: bool, preflight_timeout: float) -> None:
    """Everything before SGLang starts, a refusal first: make the dump folder, run the preflight (its fallback
    joins the plan's decisions and environment), make the built-in tiny model. `child_env`: the environment
    SGLang's processes will have."""

    require_accelerator(plan)
    make(plan.dump_dir)  # first to write: a refusal costs nothing yet
    if preflight:
        run_preflight(plan, child_env, preflight_timeout)
    if plan.tiny_dir:
        from ..tiny.builtin import ensure_builtin

        ensure_builtin(plan.tiny_dir)


def launch(plan: Plan, preflight: bool, preflight_timeout: float) -> None:
    """Start what the plan says: its checks first (dump folder, --preflight, the tiny model), then SGLang's own
    launcher in this process, whose processes inherit the plan's environment."""
    prepare(plan, {**envs.environ(), **plan.env_updates}, preflight, preflight_timeout)
    os.environ.update(plan.env_updates)
    run_sglang(plan)


def require_accelerator(plan: Plan) -> None:
    """Refuse, before anything is written, a launch SGLang would refuse for want of a GPU: asked only when NVML
    sees no GPU for the TP group and no `--device` was given, and answered by the installed release's own device
    detection (so a ROCm, XPU or NPU machine, or SGLang's CPU engine, goes ahead as SGLang would)."""
    if plan.topology.source == "nvml" and plan.topology.gpus:
        return
    if any(a == "--device" or a.startswith("--device=") for a in plan.sglang_args):
        return
    try:
        from sglang.srt.utils.common import get_device
    except Exception:  # noqa: BLE001 - a release without it: SGLang itself decides
        return
    try:
        get_device()
    except RuntimeError as e:
        why = (str(e).splitlines() or [""])[0] or type(e).__name__
        raise LaunchError(
            f"no GPU here (SGLang: {why}), so SGLang cannot serve on this machine; nothing was started or "
            "written: add --dry-run to print the plan without starting SGLang"
        ) from None


def run_preflight(plan: Plan, child_env: dict, timeout: float) -> None:
    """The all-reduce check across the TP group's GPUs; LaunchError when it fails even without P2P."""
    from . import preflight

    n = plan.tp_size
    if n < 2 or len(plan.topology.gpus) < n:
        why = "TP=1: nothing to all-reduce" if n < 2 else f"{len(plan.topology.gpus)} GPU(s) seen, TP={n}"
        print(f"preflight: skipped ({why})", file=sys.stderr)
        return
    hints = [msg for _, msg in nccl.host_warnings(plan.topology)]
    print(f"preflight: all-reduce across {n} GPUs, up to {timeout:.0f}s per attempt ...", file=sys.stderr, flush=True)
    res = preflight.run_preflight(n, env=child_env, timeout=timeout, host_hints=hints)
    print(res.report(), file=sys.stderr)
    if not res.ok:
        raise LaunchError(res.message)
    for d in res.decisions:
        print(f"[sglang_eagle3_ext] {d.name}={d.value}: {d.reason}", file=sys.stderr)
        plan.decisions.append(d)
        plan.env_updates[d.name] = d.value


def run_sglang(plan: Plan) -> None:
    """Run SGLang's own `python -m sglang.launch_server` in this process, with our patches applied; the
    environment must already hold the plan's `env_updates` (SGLang's processes inherit it).

    Why runpy and not exec: it executes exactly the installed release's `__main__` block
    (0.5.10: prepare_server_args -> run_server; 0.5.14+: load_plugins() first; 0.5.23: resolve_once),
    so nothing here depends on that release's internals, while our apply() patches stay active in
    this process (the HTTP/tokenizer side); the spawned scheduler processes get them through
    SGLANG_EAGLE3_EXT=1 and the installed .pth. alter_sys=True makes sys.argv[0]/__main__ look
    like `python -m sglang.launch_server`, which is what multiprocessing's spawn re-imports.
    """
    import runpy

    apply()
    sys.argv = [LAUNCH_MODULE, *plan.sglang_args]
    runpy.run_module(LAUNCH_MODULE, run_name="__main__", alter_sys=True)
