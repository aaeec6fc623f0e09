"""`build --dry-run`: the stages, their folders, the dump's size at this target's width, training memory per
rank (training/plan.py) and each stage's expected time where a measured figure exists. Reads the target's
config.json and the prompts file; loads no weights and starts nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..boundary import BadInput, Refused, regular_file
from ..training.plan import plan_lines as train_lines
from ..training.report import TrainDraftError
from ..training.target_view import text_config
from . import STAGES
from .options import BuildOptions

DUMP_DTYPE_BYTES = 2  # the dump stores bf16 hidden states
CHARS_PER_TOKEN = 4  # a text prompt's length before its tokenizer is loaded (the plan loads none)
# measured seconds per stage: (stage, what it scales with) -> seconds per unit. Empty: nothing measured yet, and
# the plan says so rather than guess
MEASURED: dict[tuple[str, str], float] = {}

OUTPUTS = {
    "dump": "dump/",
    "export": "export/",
    "train": "train/",
    "convert": "draft/",
    "check": "check.json",
    "eval": "eval.json",
    "report": "report.html, report.json",
}


def target_shape(target: str | Path) -> dict:
    """hidden size, layers and vocabulary of the target (a wrapper's text config, as train reads it)."""

    cfg = text_config(Path(target))
    return {k: int(cfg[k]) for k in ("hidden_size", "num_hidden_layers", "vocab_size")}


def prompt_tokens(data: str | Path, limit: int | None) -> tuple[int, int, str]:
    """(samples, prompt tokens, how they were counted) of the JSONL prompts file."""
    n = tokens = estimated = 0
    where = f"--data {data}"
    try:
        path = regular_file(data, "prompts file (JSONL)")  # a FIFO or device would never end
    except BadInput as e:
        raise BadInput(where, e.problem) from None
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue  # `dump run` skips it too, naming its line
            if not isinstance(rec, dict):
                continue
            if isinstance(rec.get("input_ids"), list):
                tokens += len(rec["input_ids"])
            elif "text" in rec or "messages" in rec:
                tokens += max(1, len(json.dumps(rec.get("text") or rec.get("messages"))) // CHARS_PER_TOKEN)
                estimated += 1
            else:
                continue
            n += 1
            if limit and n >= limit:
                break
    if n == 0:
        raise BadInput(where, 'holds no prompt line ({"id": ..., "input_ids" | "text" | "messages": ...})')
    how = (
        "token ids counted"
        if not estimated
        else f"{estimated} text prompt(s) estimated at {CHARS_PER_TOKEN} characters per token"
    )
    return n, tokens, how


def dump_bytes(samples: int, tokens: int, hidden: int, aux_layers: int = 3) -> int:
    """The dump's size: per token the aux layers' states and the last hidden state, bf16."""
    return tokens * (aux_layers + 1) * hidden * DUMP_DTYPE_BYTES


def build_plan(o: BuildOptions, train_plan) -> dict:
    """The plan of build `o`; `train_plan(fields)` returns train's dry-run plan for these TrainOptions fields."""
    out = Path(o.out)
    shape = target_shape(o.target)
    stages = []
    for s in STAGES:
        skipped = s == "dump" and bool(o.dump_dir)
        path = o.dump_dir if skipped else ", ".join(str(out / p.strip()) for p in OUTPUTS[s].split(","))
        stages.append(
            {
                "stage": s,
                "output": path,
                "runs": not skipped,
                "why": "--dump-dir: the dump is given" if skipped else None,
                "expected_s": _expected(s),
                "expected": _expected_text(s),
            }
        )
    rep = {"out": str(out), "target": str(o.target), "target_shape": shape, "stages": stages}
    aux = _aux_layers(o, shape["num_hidden_layers"])
    if not o.dump_dir and o.data:
        n, prompt, how = prompt_tokens(o.data, o.limit)
        tokens = prompt + (n * o.max_new_tokens if o.generate else 0)
        rep["dump"] = {
            "samples": n,
            "tokens": tokens,
            "counted": how,
            "aux_layers": aux,
            "generated_tokens_per_sample": o.max_new_tokens if o.generate else 0,
            "bytes": dump_bytes(n, tokens, shape["hidden_size"], aux),
            "formula": f"{tokens} tokens x ({aux} aux layers + last hidden) x hidden "
            f"{shape['hidden_size']} x {DUMP_DTYPE_BYTES} bytes",
        }
        rep["export_bytes"] = rep["dump"]["bytes"]  # the export holds the same states again
    rep["train"] = train_plan(o.train)
    return rep


def dry_run(o: BuildOptions) -> dict:
    """`--dry-run`'s plan: the inputs a run would refuse are refused by the plan too; --out may be left out."""
    o = o if o.out else dataclasses.replace(o, out="(--out)")
    o.check()
    try:
        return build_plan(o, _train_plan(o))
    except TrainDraftError as e:
        raise Refused(str(e)) from None


def _train_plan(o: BuildOptions):
    """train's dry-run plan for this build's training (on --gpus ranks)."""

    def plan(fields: dict) -> dict:
        from ..acceptance.select import train_options
        from ..training import train_draft

        world = fields.get("world_size") or o.gpus
        opts = train_options(
            {**fields, "data": None, "target": o.target, "out": None, "dry_run": True, "world_size": world}
        )
        return train_draft(opts)

    return plan


def _aux_layers(o: BuildOptions, n_layers: int) -> int:
    """The aux layers the dump captures: train's (--layer-ids, or --draft-arch's own), else the dump's default."""
    from ..dump.config import DumpConfig, DumpConfigError, parse_layers

    try:
        return len(DumpConfig(str(o.out), parse_layers(o.dump_layers or "")).resolve_layers(n_layers))
    except DumpConfigError as e:
        raise BadInput("train's layers for the dump", str(e)) from None


def _expected(stage: str) -> float | None:
    return next((v for (s, _), v in MEASURED.items() if s == stage), None)


def _expected_text(stage: str) -> str:
    v = _expected(stage)
    return "not measured" if v is None else f"{v:.0f} s"


def plan_lines(rep: dict) -> list[str]:

    sh = rep["target_shape"]
    lines = [
        f"build plan into {rep['out']} (target {rep['target']}: hidden {sh['hidden_size']}, "
        f"{sh['num_hidden_layers']} layers, vocab {sh['vocab_size']})"
    ]
    for s in rep["stages"]:
        what = s["output"] if s["runs"] else f"skipped ({s['why']}): {s['output']}"
        lines.append(f"  {s['stage']:8} -> {what}  [expected time: {s['expected']}]")
    d = rep.get("dump")
    if d:
        lines.append(
            f"dump: {d['samples']} samples, {d['tokens']:,} tokens ({d['counted']}): "
            f"{_size(d['bytes'])} ({d['formula']}); the export needs as much again"
        )
    lines += train_lines(rep["train"])
    return lines


def _size(n: int) -> str:
    for unit, k in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n} bytes"
