"""Prompt sets for `bench`: the user's JSONL / ShareGPT / MT-bench files, or built-in random token ids.

Record shapes (one per JSONL line, or a JSON array of them):
    {"input_ids": [...]}                                  token ids, sent as they are
    {"text": "..."} | {"prompt": "..."}                   plain text
    {"messages": [{"role": "user", "content": "..."}]}    chat (OpenAI style)
    {"conversations": [{"from": "human", "value": ...}]}  ShareGPT: the turns before the first reply
    {"turns": ["...", ...]}                               MT-bench question.jsonl: the first turn
Chat prompts go through the chat template of the target's tokenizer (`--target DIR`, the model the server
serves; `--trust-remote-code` only for a tokenizer that ships code you trust): they are refused without it.
A tokenizer is never loaded from a path the server names: the caller passes the loader of the one the user
named (`from_file(..., tokenizer=...)`). With a tokenizer, text is sent as token ids; without, as text (the
server tokenizes it; a --skip-tokenizer-init server needs token ids). Every record is checked where it is
read: a wrong one is named by file:line (JSONL) or file[index] (array) and key (BadInput).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..boundary import BadInput, check_type, list_of, parse_json, read_text_file, regular_file
from ..boundary import field as key

BUILTIN = ("random-ids",)
MAX_ARRAY_FILE = 2 << 30  # a JSON array is parsed whole (ShareGPT's is ~0.7 GB); JSONL streams
SHAREGPT_ROLES = {"human": "user", "user": "user", "system": "system", "gpt": "assistant", "assistant": "assistant"}


def with_flag(flag: str, e: BadInput) -> BadInput:
    """`e` with the flag that named its input in front: `FLAG where: problem`."""
    return BadInput(f"{flag} {e.where}", e.problem) if e.where else BadInput("", f"{flag} {e.problem}")


@dataclass
class PromptSet:
    prompts: list[dict]  # each {"input_ids": [...]} or {"text": "..."}
    source: str
    notes: list[str] = field(default_factory=list)


def _records(path: Path, limit: int | None) -> tuple[list[tuple[str, object]], int]:
    """([(where, record)] of the first `limit` records, how many records the file holds)."""
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"["):  # ShareGPT dumps are one JSON array
        recs = parse_json(read_text_file(path, "prompt file", MAX_ARRAY_FILE), str(path), "prompt file", list)
        return [(f"{path}[{i}]", r) for i, r in enumerate(recs[:limit])], len(recs)
    out, total = [], 0
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            total += 1
            if limit is not None and len(out) >= limit:
                continue  # counted, not parsed
            try:
                out.append((f"{path}:{i}", json.loads(raw)))
            except (ValueError, RecursionError) as e:
                raise BadInput(f"{path}:{i}", f"not JSON ({str(e)[:160]})") from None
    return out, total


def _messages(where: str, turns: list, role_key: str, content_key: str) -> list[dict]:
    msgs = []
    for i, m in enumerate(turns):
        at = f"{where}[{i}]"
        check_type(m, dict, at)
        role = key(m, role_key, str, at, optional=True, default=None)
        if role is None and role_key == "from":
            role = key(m, "role", str, at, optional=True, default="user")
        content = key(m, content_key, str, at, optional=True, default=None)
        if content is None and content_key == "value":
            content = key(m, "content", str, at, optional=True, default="")
        msgs.append({"role": role or "user", "content": content or ""})
    return msgs


def _chat(where: str, rec: dict) -> list[dict] | None:
    if "messages" in rec:
        msgs = _messages(f"{where}: 'messages'", key(rec, "messages", list, where), "role", "content")
        while msgs and msgs[-1]["role"] == "assistant":  # prompt = everything before the last reply
            msgs.pop()
        return msgs
    if "conversations" in rec:
        out = []
        for m in _messages(f"{where}: 'conversations'", key(rec, "conversations", list, where), "from", "value"):
            role = SHAREGPT_ROLES.get(m["role"], "user")
            if role == "assistant" and any(x["role"] == "user" for x in out):
                break
            out.append({"role": role, "content": m["content"]})
        return out
    if "turns" in rec:
        turns = key(rec, "turns", list, where, nonempty=True)
        return [{"role": "user", "content": check_type(turns[0], str, f"{where}: 'turns'[0]")}]
    return None


def parse_record(where: str, rec) -> dict:
    """One record -> {"input_ids"} | {"text"} | {"messages"}; BadInput naming where and the key."""
    check_type(rec, dict, where)
    if "input_ids" in rec:
        ids = key(rec, "input_ids", list, where, nonempty=True)
        return {"input_ids": list_of(ids, int, f"{where}: 'input_ids'", minimum=0)}
    for k in ("text", "prompt"):
        if k in rec:
            return {"text": key(rec, k, str, where, nonempty=True)}
    msgs = _chat(where, rec)
    if msgs and any(m["content"] for m in msgs):
        return {"messages": msgs}
    if msgs is not None:
        raise BadInput(where, "the conversation holds no prompt text before the first reply")
    raise BadInput(
        where, "needs 'input_ids', 'text'/'prompt', 'messages', 'conversations' (ShareGPT) or 'turns' (MT-bench)"
    )


def _chat_ids(tok, where: str, msgs: list[dict]) -> list[int]:
    try:
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    except Exception as e:  # noqa: BLE001 - a template refusing a conversation: name the record
        raise BadInput(
            where, f"the chat template of --target refuses this conversation ({type(e).__name__}: {str(e)[:160]})"
        ) from None
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    return list(ids)


def tokenize(parsed: list[tuple[str, dict]], tok) -> tuple[list[dict], list[str]]:
    """parsed: [(where, record)]; chat records need `tok` (refused without: a joined conversation is not
    what the model serves)."""
    if tok is None:
        chat = next((w for w, p in parsed if "messages" in p), None)
        if chat is not None:
            raise BadInput(
                chat,
                "chat prompts need the chat template of the target's tokenizer: pass --target DIR "
                "(the model the server serves; a tokenizer is never loaded from a path the server "
                "names), plus --trust-remote-code if its tokenizer ships code you trust",
            )
        return [p for _, p in parsed], []
    templ = bool(getattr(tok, "chat_template", None))
    notes = [
        "chat template of the target's tokenizer"
        if templ
        else "the target's tokenizer has no chat template: chat turns joined as plain text"
    ]
    out = []
    for where, p in parsed:
        if "messages" in p and templ:
            out.append({"input_ids": _chat_ids(tok, where, p["messages"])})
        elif "messages" in p or "text" in p:
            text = p.get("text") or "\n\n".join(m["content"] for m in p["messages"])
            out.append({"input_ids": list(tok(text)["input_ids"])})
        else:
            out.append(p)
    return out, notes


def builtin(name: str, n: int, seed: int, vocab: int, length: int = 64) -> PromptSet:
    """Built-in sets need no tokenizer (servers started with --skip-tokenizer-init)."""
    if name not in BUILTIN:
        raise BadInput(f"--builtin {name!r}", f"unknown prompt set; available: {', '.join(BUILTIN)}")
    rng = random.Random(seed)
    prompts = [{"input_ids": [rng.randrange(vocab) for _ in range(length)]} for _ in range(n)]
    return PromptSet(
        prompts,
        f"builtin:{name} (seed {seed}, vocab {vocab}, {length} tokens)",
        ["random token ids: acceptance on them says little about real text; use --prompts"],
    )


def from_file(path: str, limit: int | None, tokenizer: Callable[[], object] | None = None) -> PromptSet:
    """The first `limit` records of the file (all: None); BadInput naming --prompts, file:line and key.
    `tokenizer`: gives the target's tokenizer, called only when a record is not token ids already."""
    try:
        p = regular_file(path, "prompt file")
        recs, total = _records(p, limit)
        if not recs:
            raise BadInput(str(p), "no prompts in the file")
        parsed = [(w, parse_record(w, r)) for w, r in recs]
        tok = tokenizer() if tokenizer is not None and any("input_ids" not in r for _, r in parsed) else None
        prompts, notes = tokenize(parsed, tok)
    except BadInput as e:
        raise with_flag("--prompts", e) from None
    except OSError as e:
        raise BadInput(f"--prompts {path}", f"cannot read ({e.strerror or e})") from None
    return PromptSet(prompts, f"{path} ({len(prompts)} of {total} records)", notes)
