"""Which attention backends the timing pass times: those the installed release offers (its own
`--attention-backend` choices), the GPU runs (compute capability) and the kernels installed (the import SGLang
itself does). Each decision is said once, with its reason."""

from __future__ import annotations

import dataclasses
import logging

from ..boundary import Refused

log = logging.getLogger("sglang_eagle3_ext.tune")
KNOWN = ("fa3", "flashmla", "flashinfer", "triton")
# where each runs (SGLang 0.5.16): FA3 and FlashMLA are Hopper kernels; FlashInfer and Triton run from Ampere on
MIN_CAPABILITY = {"fa3": (9, 0), "flashmla": (9, 0), "flashinfer": (8, 0), "triton": (8, 0)}
MAX_CAPABILITY = {"fa3": (9, 9)}  # sgl-kernel's FA3 is built for sm90 only (Blackwell: fa4 / trtllm_mla)
KERNEL_IMPORT = {"fa3": "sgl_kernel.flash_attn", "flashinfer": "flashinfer", "flashmla": "sgl_kernel"}


@dataclasses.dataclass
class Decision:
    backend: str
    chosen: bool
    reason: str


def release_choices() -> list[str] | None:
    """The installed SGLang's --attention-backend choices (None: SGLang cannot be imported here)."""
    try:
        from ..launch.presets import sglang_parser

        parser = sglang_parser()
    except ImportError:
        return None
    for a in parser._actions:
        if a.dest == "attention_backend" and a.choices:
            return list(a.choices)
    return None


def refuse_unknown(asked: list[str], choices: list[str] | None, version: str) -> None:
    """A backend the release lacks is a wrong flag: refused before anything starts."""
    for b in asked:
        if b not in KNOWN:
            raise Refused(f"--backends {b}: tune times {', '.join(KNOWN)}; drop {b!r}")
        if choices is not None and b not in choices:
            raise Refused(
                f"--backends {b}: SGLang {version}'s --attention-backend has no {b!r} (its choices: "
                f"{', '.join(choices)}); drop it or install a release that has it"
            )


def _kernel_problem(backend: str) -> str | None:
    import importlib

    mod = KERNEL_IMPORT.get(backend)
    if not mod:
        return None
    try:
        importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - any failure means SGLang cannot use it either
        return f"{mod} does not import ({type(e).__name__}: {str(e)[:120]})"
    return None


def decide(
    asked: list[str], capability: tuple[int, int] | None, mla: bool | None, logged: bool = True
) -> list[Decision]:
    """One decision per asked backend; `capability` None: no GPU here (a dry run decides by the release only).
    logged=False: the caller prints them itself (the dry run's plan), so each is said once."""
    out = []
    for b in asked:
        if b == "flashmla" and mla is False:
            out.append(Decision(b, False, "FlashMLA serves MLA targets only; this target has no kv_lora_rank"))
            continue
        if capability is None:
            out.append(Decision(b, True, "offered by the release; the GPU is checked when the run starts"))
            continue
        lo, hi = MIN_CAPABILITY[b], MAX_CAPABILITY.get(b, (99, 9))
        if not lo <= capability <= hi:
            out.append(
                Decision(
                    b,
                    False,
                    f"needs compute capability {lo[0]}.{lo[1]}"
                    + (f"..{hi[0]}.{hi[1]}" if b in MAX_CAPABILITY else "+")
                    + f", this GPU is {capability[0]}.{capability[1]}",
                )
            )
            continue
        problem = _kernel_problem(b)
        out.append(
            Decision(
                b,
                problem is None,
                problem
                or f"offered by the release, runs on compute capability "
                f"{capability[0]}.{capability[1]}, its kernels import",
            )
        )
    for d in out if logged else ():
        log.info("backend %s: %s (%s)", d.backend, "timed" if d.chosen else "left out", d.reason)
    return out


def gpu_capability() -> tuple[int, int] | None:
    try:
        import torch

        return tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no usable GPU: decided by the release alone
        return None
