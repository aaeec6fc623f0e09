"""Every hidden-state file both trainers read (`hs_{i}.safetensors`), checked before training starts.

A file that is not what training needs is refused by name instead of being trained on: NaN/Inf states made
every argmax agree (a validation accuracy of 1.0 from nothing, and a NaN draft), a state width or row count
that disagrees with the target or the token ids crashes deep in a trainer or trains on shifted rows, and ids
past the vocab (e.g. multimodal pad values) index garbage.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..boundary import BadInput, regular_file
from ..dump.sample_file import token_id_problem
from .report import TrainDraftError

IDS, STATES = "token_ids", "hidden_states"
FLOAT_DTYPES = ("bfloat16", "float16", "float32")


@dataclasses.dataclass(frozen=True)
class SampleSpec:
    """What each file must hold: states [L, n_slots, hidden] (n_slots = aux layers + the final state),
    ids in [0, vocab). None: taken from the first file, then required of every other."""

    n_slots: int | None
    hidden: int | None
    vocab: int
    slots_from: str = ""  # where n_slots comes from, for the message


def _refuse(path: Path, problem: str):
    raise TrainDraftError(f"{path}: {problem}; fix or remove this sample (training reads every hs_i)")


def _read(path: Path):
    from safetensors import safe_open

    try:
        regular_file(path, "sample file")  # a FIFO would block the reader
    except BadInput as e:
        _refuse(path, e.problem)
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            missing = [k for k in (IDS, STATES) if k not in keys]
            if missing:
                _refuse(path, f"no {' and no '.join(missing)} tensor (has {sorted(keys)})")
            return f.get_tensor(IDS), f.get_tensor(STATES)
    except TrainDraftError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors' errors (and torch's dtype ones) say what, not where
        _refuse(path, f"not a readable safetensors file ({type(e).__name__}: {str(e)[:200]})")


def _states_problem(L: int, shape: tuple, spec: SampleSpec) -> str | None:
    if (
        len(shape) == 3
        and shape[0] == L
        and (not spec.n_slots or shape[1] == spec.n_slots)
        and (not spec.hidden or shape[2] == spec.hidden)
    ):
        return None
    slots = (
        f"{spec.n_slots} slots per token ({spec.slots_from or 'the aux layers + the final state'})"
        if spec.n_slots
        else "K+1 slots per token (K aux layers + the final state)"
    )
    return (
        f"{STATES} is {list(shape)}, expected [{L}, {spec.n_slots or 'K+1'}, {spec.hidden or 'H'}]: "
        f"{L} rows (one per token id), {slots}, width {spec.hidden or 'H'} (the target's hidden size)"
    )


def header_length(path, spec: SampleSpec) -> int:
    """The tokens of one file from its header alone (nothing else is read), its shapes checked as load_sample
    checks them; TrainDraftError naming it."""
    from ..draft.safetensors_io import read_header

    path = Path(path)
    tensors, problems = read_header(path)
    if problems:
        _refuse(path, f"not a readable safetensors file ({problems[0].message.replace(f'{path}: ', '', 1)})")
    missing = [k for k in (IDS, STATES) if k not in tensors]
    if missing:
        _refuse(path, f"no {' and no '.join(missing)} tensor (has {sorted(tensors)})")
    ids = tensors[IDS]
    if len(ids.shape) != 1 or ids.dtype.startswith(("F", "BF", "BOOL")):
        _refuse(path, f"{IDS} must be a 1-D integer tensor, got {ids.dtype} {list(ids.shape)}")
    if not ids.shape[0]:
        _refuse(path, "holds no tokens")
    problem = _states_problem(ids.shape[0], tensors[STATES].shape, spec)
    if problem:
        _refuse(path, problem)
    return ids.shape[0]


def load_sample(path, spec: SampleSpec):
    """(ids int64 [L], states [L, n_slots, hidden]) of one file, every rule checked; TrainDraftError naming it."""
    import torch

    path = Path(path)
    ids, hs = _read(path)
    if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool or ids.is_complex():
        _refuse(path, f"{IDS} must be a 1-D integer tensor, got {str(ids.dtype)[6:]} {list(ids.shape)}")
    L = int(ids.shape[0])
    if L == 0:
        _refuse(path, "holds no tokens")
    problem = token_id_problem(ids, spec.vocab)
    if problem:
        _refuse(path, problem)
    problem = _states_problem(L, tuple(hs.shape), spec)
    if problem:
        _refuse(path, problem)
    if str(hs.dtype).replace("torch.", "") not in FLOAT_DTYPES:
        _refuse(path, f"{STATES} is {str(hs.dtype)[6:]}, expected one of {', '.join(FLOAT_DTYPES)}")
    bad = ~torch.isfinite(hs)
    if bool(bad.any()):
        rows = bad.flatten(1).any(1).nonzero().flatten()
        _refuse(
            path,
            f"{STATES} holds NaN/Inf ({int(bad.sum())} values in {rows.numel()} of {L} rows, first row "
            f"{int(rows[0])}): a draft trained on it learns nothing and reports any accuracy",
        )
    return ids.long(), hs


def check_samples(files: list[Path], spec: SampleSpec, say=None) -> SampleSpec:
    """Read and check every file (one at a time); returns the spec with the slot count and width filled in."""
    import time

    t0, nbytes = time.perf_counter(), 0
    for p in files:
        ids, hs = load_sample(p, spec)
        if spec.n_slots is None or spec.hidden is None:
            spec = dataclasses.replace(spec, n_slots=int(hs.shape[1]), hidden=int(hs.shape[2]))
        nbytes += hs.numel() * hs.element_size()
    if say is not None:
        say(
            f"checked {len(files)} samples ({nbytes / 2**30:.2f} GiB of states: finite, shapes, token ids) in "
            f"{time.perf_counter() - t0:.1f}s"
        )
    return spec
