"""--resume's checks of the checkpoint in --out against the run about to continue it, made on rank 0 before
anything is loaded into the model or trained: the model file's names and shapes (its safetensors header only),
the optimizer's and the scheduler's states (read memory-mapped, never into the run) and the step each records,
and the history state.json carries. What does not fit is refused in one line naming the file and what differs
(a corrupt file is named as such); --out stays as it was.

`expected` is what the run's own draft holds: name -> shape of what the checkpoint saves (the trained
parameters, plus the Llama route's vocabulary mapping), and the trained parameters in the optimizer's order.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import NoReturn

from ..boundary import BadInput, check_type, field, read_json_file
from .report import TrainDraftError

FIX = "resume with the settings it was trained with, or train afresh with --force"
AFRESH = "train afresh with --force"
_MAX_DIFFS = 3


def refuse(path, problem: str, fix: str = FIX) -> NoReturn:
    raise TrainDraftError(f"--resume: {path}: {problem}; {fix}")


def _shape(s) -> str:
    return str(list(s))


def check_model_file(path: Path, expected: dict[str, tuple]) -> None:
    """The checkpoint's model file holds exactly `expected` (names and shapes), read from its header."""
    from ..draft.safetensors_io import read_header

    if not path.is_file():
        refuse(path, "missing: the checkpoint is incomplete", AFRESH)
    tensors, problems = read_header(path)
    if problems:
        why = problems[0].message.replace(f"{path}: ", "", 1)
        refuse(path, f"corrupt ({why})", AFRESH)
    have = {k: v.shape for k, v in tensors.items()}
    diffs = [
        f"{k} is {_shape(have[k])}, this run's is {_shape(s)}"
        for k, s in expected.items()
        if k in have and tuple(have[k]) != tuple(s)
    ]
    diffs += [f"it lacks {k} {_shape(s)}" for k, s in expected.items() if k not in have]
    diffs += [f"it holds {k} {_shape(s)}, which this run's draft has not" for k, s in have.items() if k not in expected]
    if diffs:
        more = f" (and {len(diffs) - _MAX_DIFFS} more)" if len(diffs) > _MAX_DIFFS else ""
        was, now = _settings(have), _settings(expected)
        hint = ", ".join(f"{flag} {v}" for flag, v in was.items() if now.get(flag) != v)
        hint = f"; it was trained with {hint}" if hint else ""
        refuse(path, f"does not fit the draft this run builds: {'; '.join(diffs[:_MAX_DIFFS])}{more}{hint}")


def _settings(shapes: dict) -> dict[str, int]:
    """The flags a draft's tensor shapes tell: its decoder layers, MLP width and draft vocabulary."""
    import re

    got = {}
    layers = {int(m.group(1)) for k in shapes for m in [re.match(r"layers\.(\d+)\.", k)] if m}
    if layers:
        got["--num-layers"] = max(layers) + 1
    gate = next((s for k, s in sorted(shapes.items()) if k.endswith("mlp.gate_proj.weight") and len(s) == 2), None)
    if gate is not None:
        got["--intermediate-size"] = gate[0]
    if len(shapes.get("d2t", ())) == 1:
        got["--draft-vocab-size"] = shapes["d2t"][0]
    return got


def load_torch_state(path: Path, what: str):
    """A torch.save'd state, read safely (weights only) and memory-mapped; a file that is not one is named
    as corrupt."""
    import torch

    if not path.is_file():
        refuse(path, "missing: the checkpoint is incomplete", AFRESH)
    if not zipfile.is_zipfile(path):  # what torch.save writes; a truncated one has lost its directory
        refuse(path, f"corrupt: not {what} torch wrote (no zip archive: truncated, or another file)", AFRESH)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - whatever the unpickler says: the file is not a state torch wrote
        first = (str(e).strip().splitlines() or [""])[0][:160]
        refuse(path, f"corrupt: not {what} torch can read ({type(e).__name__}: {first})", AFRESH)


def _other_run(path: Path, what: str, global_step: int) -> NoReturn:
    refuse(path, f"records {what}, its state.json {global_step}: another run's file", AFRESH)


def _scalar(v) -> float | None:
    """A step count held as a number or a 0-d tensor; None for anything else."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if hasattr(v, "dim") and v.dim() == 0 and not v.is_complex():
        return float(v)
    return None


def check_optimizer(path: Path, params: list[tuple[str, tuple]], global_step: int, by_name: bool) -> None:
    """The optimizer state at `path` is one for `params` (name, shape; in the optimizer's order), after
    `global_step` steps. by_name: its state is keyed by parameter name (a full state dict gathered over the
    ranks), else by index."""
    osd = load_torch_state(path, "an optimizer state")
    if (
        not isinstance(osd, dict)
        or not isinstance(osd.get("state"), dict)
        or not isinstance(osd.get("param_groups"), list)
    ):
        refuse(path, "not an optimizer state (expected 'state' and 'param_groups')", AFRESH)
    shapes = dict(params)
    names = [n for n, _ in params]
    listed = []
    for g in osd["param_groups"]:
        if not isinstance(g, dict) or not isinstance(g.get("params"), list):
            refuse(path, "not an optimizer state (a param group without 'params')", AFRESH)
        listed += g["params"]
    if by_name:
        lacking = [n for n in names if n not in listed]
        if lacking:
            refuse(path, f"holds no state for {lacking[0]}, which this run trains ({len(lacking)} such)")
    elif listed != list(range(len(names))):
        refuse(path, f"holds the state of {len(listed)} parameters, this run trains {len(names)}")
    steps = []
    for key, st in osd["state"].items():
        name = key if by_name else (names[key] if isinstance(key, int) and 0 <= key < len(names) else None)
        if name not in shapes or not isinstance(st, dict):
            refuse(path, f"holds a state for {key!r}, which this run's draft does not train")
        for k, v in st.items():
            n = _scalar(v)
            if k == "step" and n is not None:
                steps.append(n)
            elif hasattr(v, "shape") and v.dim() > 0 and tuple(v.shape) != tuple(shapes[name]):
                refuse(path, f"its {k} of {name} is {_shape(v.shape)}, this run trains {_shape(shapes[name])}")
    if steps and max(steps) != global_step:
        _other_run(path, f"{max(steps):g} optimizer steps", global_step)


def check_scheduler(path: Path, global_step: int, groups: int | None = None) -> None:
    """The learning-rate schedule(s) at `path` stepped `global_step` times, over `groups` parameter groups."""
    s = load_torch_state(path, "a scheduler state")
    for one in s if isinstance(s, list) else [s]:
        if (
            not isinstance(one, dict)
            or type(one.get("last_epoch")) is not int
            or not isinstance(one.get("base_lrs"), list)
        ):
            refuse(path, "not a learning-rate scheduler state (expected 'last_epoch' and 'base_lrs')", AFRESH)
        if one["last_epoch"] != global_step:
            _other_run(path, f"{one['last_epoch']} scheduler steps", global_step)
        if groups is not None and len(one["base_lrs"]) != groups:
            refuse(path, f"schedules {len(one['base_lrs'])} parameter groups, this run's optimizer has {groups}")


def check_training_state(path: Path, epochs_done: int, global_step: int) -> None:
    """speculators' training_state.json beside its checkpoint: the end of epoch `epochs_done`."""
    try:
        st = read_json_file(path, "speculators training state")
        where = str(path)
        field(st, "epoch", int, where, choices=(epochs_done - 1,))
        field(st, "global_step", int, where, choices=(global_step,))
        field(st, "local_step", int, where, optional=True, default=0, choices=(0,))
    except BadInput as e:
        raise TrainDraftError(f"--resume: {e}; train afresh with --force") from None


# the row values that are not one number: the MLA route's accuracy per TTT step, a learning rate per optimizer
_LISTS, _MAPS = ("accs",), ("lr",)


def _numbers(key: str, v, where: str):
    """A row's value: a number (a list of them under _LISTS, a map under _MAPS), null read as NaN."""
    if key in _LISTS and isinstance(v, list):
        return [_number(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if key in _MAPS and isinstance(v, dict):
        return {k: _number(x, f"{where}: {k!r}") for k, x in v.items()}
    return _number(v, where)


def _number(v, where: str):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return math.nan
    return check_type(v, (int, float), where)


def check_history(state: dict, where: str, required: tuple[str, ...] = (), accs: int | None = None) -> None:
    """state.json's history (one row per optimizer step) and validation rows: numbers (null: one that measured
    nothing, read back as NaN), lists or maps of numbers; each row with the `required` keys, and `accs`
    accuracies when given (the run's --ttt-steps)."""
    try:
        for key in ("history", "val"):
            rows = field(state, key, list, where, optional=True, default=[])
            for i, row in enumerate(rows):
                at = f"{where}: {key}[{i}]"
                check_type(row, dict, at)
                for k in required if key == "history" else ():
                    field(row, k, object, at)
                for k, v in list(row.items()):
                    row[k] = _numbers(k, v, f"{at}: {k!r}")
                if key == "history" and accs is not None and len(field(row, "accs", list, at)) != accs:
                    n = len(row["accs"])
                    refuse(f"{at}: 'accs'", f"{n} accuracies: trained with --ttt-steps {n}, this run has {accs}")
    except BadInput as e:
        raise TrainDraftError(f"--resume: {e}; {AFRESH}") from None
