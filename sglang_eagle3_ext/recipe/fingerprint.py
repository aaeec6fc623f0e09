"""What each stage is made from: its inputs (the files it reads, by content hash, or by size and mtime when large,
and every flag that shapes what it writes), and a fingerprint over them and the fingerprint of the stage before
it. A finished stage is reused only while its fingerprint is today's; `changed` says what differs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..boundary import BadInput, read_text_file, regular_file
from . import state
from .digest import file_sha256, folder_id
from .report import serve_preset

HASH_LIMIT = 1 << 30  # a data file up to this size is known by its content, a larger one by its size and mtime
NOT_GIVEN = "not given"
# train's flags that shape no output: how fast or how loudly it runs, and what the plan assumes
TRAIN_NOT_SHAPING = frozenset({"num_workers", "log_every", "device_memory_gib", "world_size", "keep_checkpoints"})
OUR_DUMP = "OUT/dump"


def data_id(path, flag: str = "--data") -> dict | str:
    """The prompts file by its content (size and mtime above HASH_LIMIT); checked to be a regular file first,
    since a FIFO would block its reader."""
    if not path:
        return NOT_GIVEN
    try:
        p = regular_file(path, "prompts file")
    except BadInput as e:
        raise BadInput(f"{flag} {path}", e.problem) from None
    st = os.stat(p)
    if st.st_size <= HASH_LIMIT:
        return {"sha256": file_sha256(p)}
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def target_id(target) -> dict:
    """The target by its folder and its config.json's content."""
    cfg = Path(target) / "config.json"
    text = read_text_file(cfg, "--target's config.json", max_bytes=16 << 20)
    return {"path": str(Path(target).resolve()), "config_sha256": hashlib.sha256(text.encode()).hexdigest()}


def dump_id(run) -> dict:
    """The dump export reads: where (build's own, or --dump-dir) and what its manifests list."""
    o = run.o
    size = state.dump_size(o.dump_path)
    where = str(Path(o.dump_dir).resolve()) if o.dump_dir else OUR_DUMP
    return {"path": where, **{k: size[k] for k in ("samples", "tokens", "bytes")}}


def _flags(values: dict) -> dict:
    return {"--" + k.replace("_", "-"): v for k, v in sorted(values.items())}


def stage_inputs(run, stage: str) -> dict:
    """The inputs `stage` of this build is made from now, keyed by the flag (or thing) they come from."""
    o = run.o
    if stage == "dump":
        shaping = {"generate": o.generate, "limit": o.limit}
        if o.generate:
            shaping.update(max_new_tokens=o.max_new_tokens, temperature=o.temperature)
        layers = {"dump layers": o.dump_layers} if o.dump_layers else {}  # train's, when it names them
        return {"--data": data_id(o.data), "--target": target_id(o.target), **_flags(shaping), **layers}
    if stage == "export":
        return {"dump": dump_id(run), "--data": NOT_GIVEN if o.dump_dir else data_id(o.data)}
    if stage == "train":
        train = {k: v for k, v in o.train.items() if k not in TRAIN_NOT_SHAPING}
        if train.get("init_from"):
            init = Path(train["init_from"])
            train["init_from"] = {"path": str(init.resolve()), "content": folder_id(init)}
        return {"--target": target_id(o.target), "--gpus": o.gpus, **_flags(train)}
    if stage == "check":
        return {"--target": target_id(o.target), "draft": folder_id(run.out / "draft")}
    if stage == "eval":
        return _flags({"spec_steps": o.spec_steps, "eval_samples": o.eval_samples, "eval_dtype": o.eval_dtype})
    if stage == "report":
        return {"serve preset": serve_preset(o)[0], "--spec-steps": o.spec_steps}
    return {}  # convert: made from train's output alone


def plain(inputs: dict) -> dict:
    """`inputs` as JSON gives them back (tuples as lists), so a recorded and a computed value compare equal."""
    return json.loads(json.dumps(inputs, default=str, sort_keys=True))


def fingerprint(stage: str, inputs: dict, before: str) -> str:
    text = json.dumps({"stage": stage, "inputs": inputs, "before": before}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def changed(recorded: dict, now: dict) -> list[str]:
    """What differs between a stage's recorded inputs and today's, one short phrase each."""
    out = []
    for k in sorted(set(recorded) | set(now)):
        a, b = recorded.get(k, NOT_GIVEN), now.get(k, NOT_GIVEN)
        if a != b:
            out.append(f"{k} {_short(a)} -> {_short(b)}")
    return out


def _short(v) -> str:
    if isinstance(v, dict):
        if "sha256" in v:
            return f"sha256 {v['sha256'][:12]}" + (f" ({v['files']} files)" if "files" in v else "")
        if "config_sha256" in v:
            return f"{v.get('path')} (config.json {v['config_sha256'][:12]})"
        if "samples" in v:
            return f"{v.get('path')} ({v['samples']} samples, {v['tokens']} tokens)"
    text = json.dumps(v, default=str) if not isinstance(v, str) else v
    return text if len(text) <= 60 else text[:57] + "..."
