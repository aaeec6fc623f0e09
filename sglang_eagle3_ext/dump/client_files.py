"""The files the dump driver reads: the user's JSONL dataset, and in the dump dir the manifests, the writers'
status files and generated.jsonl. Each is checked where it is read (regular files only: a FIFO would block;
every key of the type it must have); what is wrong is a `BadInput` naming file:line and key.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .. import envs
from ..boundary import BadInput, check_type, field, list_of, read_json_file, regular_file
from .config import ENV_DISCARD, GENERATED_FILE, META_FILE
from .export import ExportError, inside
from .manifest import manifest_files, parse_manifest_line, sanitize_id
from .status import STATUS_DIR

log = logging.getLogger("sglang_eagle3_ext.dump.driver")
KINDS = ("input_ids", "text", "messages")


class ClientError(RuntimeError):
    """The driver cannot go on (no sample to send, no server dumping into the dump dir); names the fix."""


# ---- the dataset ------------------------------------------------------------------------------------
def parse_sample(obj, where: str, n: int) -> dict:
    """One dataset line -> {"id", "kind", "value", "loss_mask"}; BadInput naming where and the key."""
    check_type(obj, dict, where)
    kinds = [k for k in KINDS if k in obj]
    if len(kinds) != 1:
        raise BadInput(where, "needs exactly one of 'input_ids' / 'text' / 'messages'")
    kind = kinds[0]
    if kind == "input_ids":
        val = list_of(field(obj, kind, list, where, nonempty=True), int, f"{where}: 'input_ids'", minimum=0)
    elif kind == "text":
        val = field(obj, kind, str, where, nonempty=True)
    else:
        val = field(obj, kind, list, where, nonempty=True)
        for i, m in enumerate(val):
            field(m, "role", str, f"{where}: 'messages'[{i}]")
            field(m, "content", (str, list), f"{where}: 'messages'[{i}]", optional=True)
    raw_id = field(obj, "id", (str, int), where, optional=True, default=f"line-{n}")
    mask = field(obj, "loss_mask", list, where, optional=True)
    if mask is not None:
        list_of(mask, int, f"{where}: 'loss_mask'", minimum=0)
        if any(v > 1 for v in mask):
            raise BadInput(f"{where}: 'loss_mask'", "entries must be 0 or 1")
        if kind == "input_ids" and len(mask) != len(val):
            raise BadInput(f"{where}: 'loss_mask'", f"has {len(mask)} entries, 'input_ids' {len(val)}")
    return {"id": sanitize_id(str(raw_id)), "kind": kind, "value": val, "loss_mask": mask}


def read_samples(
    path, limit: int | None = None, strict: bool = False, what: str = "--data file"
) -> tuple[list[dict], int, int]:
    """(samples, malformed lines, duplicate ids): ids sanitised, the first of each id kept. A malformed line
    is skipped with a warning naming file:line and key, or with `strict` raises BadInput. `what`: the file as
    the command's flag names it."""
    p = regular_file(path, what)
    out, seen, bad, dups = [], set(), 0, 0
    with open(p, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            where = f"{p}:{n}"
            try:
                try:
                    obj = json.loads(raw)
                except (ValueError, RecursionError) as e:
                    raise BadInput(where, f"not JSON ({str(e)[:120]})") from None
                s = parse_sample(obj, where, n)
            except BadInput as e:
                if strict:
                    raise
                bad += 1
                log.warning("skipped malformed line: %s", e)
                continue
            if s["id"] in seen:
                dups += 1
                log.warning("%s: skipped duplicate id %r", where, s["id"])
                continue
            seen.add(s["id"])
            out.append(s)
            if limit and len(out) >= limit:
                break
    return out, bad, dups


def generated_loss_masks(dump_dir) -> dict:
    """Response-only masks of `run --generate` samples (last record per id wins: a re-run regenerates). A
    torn last line after a crash is skipped; a record of the wrong shape is a BadInput."""

    masks = {}
    if not (Path(dump_dir) / GENERATED_FILE).exists():
        return masks
    p = regular_file(inside(dump_dir, GENERATED_FILE), GENERATED_FILE)
    with open(p, "rb") as fh:
        for n, line in enumerate(fh, 1):
            try:
                r = json.loads(line)
            except (ValueError, RecursionError):
                continue
            where = f"{p}:{n}"
            sid = field(r, "id", str, where)
            total = field(r, "len", int, where, minimum=1)
            prompt = field(r, "prompt_len", int, where, minimum=0, maximum=total)
            masks[sid] = [0] * prompt + [1] * (total - prompt)
    return masks


# ---- the dump dir -----------------------------------------------------------------------------------
class ManifestTail:
    """Incrementally reads manifests/*.jsonl: ids, tokens and bytes of complete samples."""

    def __init__(self, dump_dir):
        self.root = Path(dump_dir)
        self.offsets: dict[Path, tuple[int, int]] = {}  # file -> (bytes read, lines read)
        self.ids: set[str] = set()
        self.tokens = 0
        self.bytes = 0

    def poll(self) -> None:
        for f in manifest_files(self.root):
            off, lines = self.offsets.get(f, (0, 0))
            with open(f, "rb") as fh:
                fh.seek(off)
                data = fh.read()
            end = data.rfind(b"\n") + 1  # only whole lines
            for line in data[:end].splitlines():
                lines += 1
                rec = parse_manifest_line(line, f"{f}:{lines}") if line.strip() else None
                if rec is None or rec["id"] in self.ids:
                    continue
                self.ids.add(rec["id"])
                self.tokens += rec.get("num_tokens", 0)
                self.bytes += rec.get("bytes", 0)
            self.offsets[f] = (off + end, lines)


def read_status(path: Path) -> dict:
    """One writer's status/<name>.json, checked: an object whose state and error are strings (error may be
    null) and whose stats are an object."""
    s = read_json_file(path, "writer status file", max_bytes=1 << 20)
    where = str(path)
    field(s, "state", str, where, optional=True)
    field(s, "error", str, where, optional=True)
    field(s, "stats", dict, where, optional=True)
    return s


def writer_status(d: Path, unreadable_listed: bool = False) -> dict:
    """name -> the writer's status file (status/<name>.json); BadInput for one that is not a regular file
    holding a status object, or that lies outside the dump dir (with `unreadable_listed`: that writer's entry
    says so instead, state 'unreadable', so a report still lists every other writer)."""

    out = {}
    for st in sorted((d / STATUS_DIR).glob("*.json")) if (d / STATUS_DIR).is_dir() else []:
        try:
            try:
                path = inside(d, f"{STATUS_DIR}/{st.name}")
            except ExportError as e:
                raise BadInput(str(st), str(e)) from None
            out[st.stem] = read_status(path)
        except BadInput as e:
            if not unreadable_listed:
                raise
            out[st.stem] = {"state": "unreadable", "error": str(e)}
    return out


def skip_counters(status: dict) -> dict:
    """Requests the writers counted and did not write (every `skipped_*` counter, e.g. skipped_multimodal:
    image requests, whose positions hold pad values, not token ids), summed over writers; {} when none."""
    out: dict[str, int] = {}
    for s in status.values():
        for k, v in [*s.items(), *(s.get("stats") or {}).items()]:  # a counter in stats, or beside them
            if k.startswith("skipped") and isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                out[k] = out.get(k, 0) + v
    return out


def require_server_dumping_to(dump_dir) -> dict:
    """The dump dir's meta, once its meta and status files show a server dumping into it (not stopped,
    not discarding); else ClientError saying what to fix."""
    d = Path(dump_dir)
    meta = d / META_FILE
    if not meta.exists():
        raise ClientError(
            f"{meta} not found: the server is not dumping to {d} (is {envs.DUMP_DIR} set to this path, "
            f"SGLANG_EAGLE3_EXT=1, and the dir shared with this client? see the server log for "
            f"'dump: DISABLED')"
        )
    for name, s in writer_status(d).items():
        if s.get("state") == "stopped":
            raise ClientError(f"writer {name} stopped: {s.get('error')} (fix it and restart the server)")
        if s.get("state") == "discarding":
            raise ClientError(
                f"writer {name} writes nothing: the server runs with {ENV_DISCARD}=1 (a benchmarking "
                f"aid); restart it without that variable to dump"
            )
    return read_json_file(meta, "dump meta file")
