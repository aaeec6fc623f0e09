"""Prompt sets for `bench`: the user's JSONL / ShareGPT / MT-bench files, or built-in random token ids.

Record shapes (one per JSONL line, or a JSON array of them):
    {"input_ids": [...]}                                  token ids, sent as they are
    {"text": "..."} | {"prompt": "..."}                   plain text
    {"messages": [{"role": "user", "content": "..."}]}    chat (OpenAI style)
    {"conversations": [{"from": "human", "value": ...}]}  ShareGPT: the turns before the first reply
    {"turns": ["...", ...]}                               MT-bench question.jsonl: the first turn
Chat prompts go through the target's chat template when its tokenizer has one (`--target DIR`, or the
server's model path when it is a local folder); text is then sent as token ids. Without a tokenizer the
text is sent as text (the server tokenizes it; a --skip-tokenizer-init server needs token ids).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from .cli_common import CliError

BUILTIN = ("random-ids",)


@dataclass
class PromptSet:
    prompts: list[dict]                      # each {"input_ids": [...]} or {"text": "..."}
    source: str
    notes: list[str] = field(default_factory=list)


def _records(path: Path) -> list[tuple[str, dict]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"--prompts {path}: cannot read ({e})") from None
    if text.lstrip().startswith("["):  # ShareGPT dumps are one JSON array
        try:
            recs = json.loads(text)
        except json.JSONDecodeError as e:
            raise CliError(f"--prompts {path}: not valid JSON ({e})") from None
        return [(f"{path}[{i}]", r) for i, r in enumerate(recs)]
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"{path}:{i}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise CliError(f"{path}:{i}: not JSON ({e})") from None
    return out


def _chat(where: str, rec: dict) -> list[dict] | None:
    if isinstance(rec.get("messages"), list):
        msgs = [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in rec["messages"]]
        while msgs and msgs[-1]["role"] == "assistant":  # prompt = everything before the last reply
            msgs.pop()
        return msgs
    if isinstance(rec.get("conversations"), list):
        roles = {"human": "user", "user": "user", "system": "system", "gpt": "assistant", "assistant": "assistant"}
        msgs = []
        for turn in rec["conversations"]:
            role = roles.get(turn.get("from", turn.get("role")), "user")
            if role == "assistant" and any(m["role"] == "user" for m in msgs):
                break
            msgs.append({"role": role, "content": turn.get("value", turn.get("content", ""))})
        return msgs
    if isinstance(rec.get("turns"), list) and rec["turns"]:
        return [{"role": "user", "content": str(rec["turns"][0])}]
    return None


def parse_record(where: str, rec) -> dict:
    """One record -> {"input_ids"} | {"text"} | {"messages"}."""
    if not isinstance(rec, dict):
        raise CliError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if "input_ids" in rec:
        ids = rec["input_ids"]
        if not (isinstance(ids, list) and ids and all(isinstance(t, int) and t >= 0 for t in ids)):
            raise CliError(f"{where}: 'input_ids' must be a non-empty list of token ids")
        return {"input_ids": ids}
    for key in ("text", "prompt"):
        if isinstance(rec.get(key), str):
            return {"text": rec[key]}
    msgs = _chat(where, rec)
    if msgs and any(m["content"] for m in msgs):
        return {"messages": msgs}
    raise CliError(f"{where}: needs 'input_ids', 'text'/'prompt', 'messages', 'conversations' (ShareGPT) or "
                   f"'turns' (MT-bench)")


def load_tokenizer(target: str | None):
    """The target's tokenizer, or None when there is no target or it has none."""
    if not target:
        return None
    from .cli_common import optional

    tf = optional("transformers", f"tokenizing prompts with the tokenizer of {target}")
    try:
        return tf.AutoTokenizer.from_pretrained(target, trust_remote_code=True)
    except Exception as e:  # noqa: BLE001 - any loader failure: say which folder and why
        raise CliError(f"--target {target}: cannot load its tokenizer ({type(e).__name__}: {str(e)[:200]})") from None


def tokenize(parsed: list[dict], tok) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    if tok is None:
        if any("messages" in p for p in parsed):
            notes.append("no tokenizer: chat turns joined as plain text, no chat template (pass --target DIR)")
        return [{"text": "\n\n".join(m["content"] for m in p["messages"])} if "messages" in p else p
                for p in parsed], notes
    templ = bool(getattr(tok, "chat_template", None))
    notes.append("chat template of the target's tokenizer" if templ else "the target's tokenizer has no chat "
                 "template: chat turns joined as plain text")
    out = []
    for p in parsed:
        if "messages" in p and templ:
            ids = tok.apply_chat_template(p["messages"], add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            out.append({"input_ids": list(ids)})
        elif "messages" in p or "text" in p:
            text = p.get("text") or "\n\n".join(m["content"] for m in p["messages"])
            out.append({"input_ids": tok(text)["input_ids"]})
        else:
            out.append(p)
    return out, notes


def builtin(name: str, n: int, seed: int, vocab: int, length: int = 64) -> PromptSet:
    """Built-in sets need no tokenizer (servers started with --skip-tokenizer-init)."""
    if name not in BUILTIN:
        raise CliError(f"--builtin {name!r}: unknown prompt set; available: {', '.join(BUILTIN)}")
    rng = random.Random(seed)
    prompts = [{"input_ids": [rng.randrange(vocab) for _ in range(length)]} for _ in range(n)]
    return PromptSet(prompts, f"builtin:{name} (seed {seed}, vocab {vocab}, {length} tokens)",
                     ["random token ids: acceptance on them says little about real text; use --prompts"])


def from_file(path: str, limit: int | None, target: str | None) -> PromptSet:
    recs = _records(Path(path))
    if not recs:
        raise CliError(f"--prompts {path}: no prompts in the file")
    parsed = [parse_record(w, r) for w, r in recs[: limit or None]]
    tok = load_tokenizer(target) if any("input_ids" not in p for p in parsed) else None
    prompts, notes = tokenize(parsed, tok)
    return PromptSet(prompts, f"{path} ({len(prompts)} of {len(recs)} records)", notes)
