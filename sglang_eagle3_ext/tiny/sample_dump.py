"""A small real dump without a GPU: the tiny target's hidden states, computed on CPU with transformers'
DeepseekV3ForCausalLM, written in the dumping server's format (its metadata, its writer, one pure-prefill
ChunkBatch per request) so that `dump status`, `dump export`, `train`, `eval` read it as a served dump.

Same rules as the server: the aux layers a dump captures when none are named (DumpConfig.resolve_layers:
draft/layers.py's default, HF indices set directly -- the dump bypasses SGLang's +1 rule), the final state
before the last norm, bf16 on disk. With `new_tokens` > 0 each prompt is first answered greedily and
prompt + answer is dumped, the answer lengths in generated.jsonl, as `dump run --generate` records them.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from ..boundary import BadInput
from ..dump.client_files import read_samples
from ..dump.config import GENERATED_FILE, DumpConfig
from ..dump.manifest import sanitize_id
from ..env_rules import DraftLayers
from ..in_server.dump.assemble import ChunkBatch
from ..in_server.dump.start import build_meta, make_writer
from ..server.startup import StartupContext

BATCH = 8  # prompts per forward pass: the MoE's per-expert loop runs once per batch


def random_prompts(count: int, vocab_size: int, seed: int) -> list[tuple[str, list[int]]]:
    """`count` token-id prompts of 16..48 tokens (the tiny target has no tokenizer), the same for a seed."""
    rng = random.Random(seed)
    return [(f"sample-{i:05d}", [rng.randrange(vocab_size) for _ in range(rng.randint(16, 48))]) for i in range(count)]


def file_prompts(path: Path, count: int, vocab_size: int, what: str = "--prompts file") -> list[tuple[str, list[int]]]:
    """The first `count` prompts of a `dump run --data` file; token ids only (the tiny target has no
    tokenizer); BadInput naming the file and line otherwise."""

    samples, _bad, _dups = read_samples(path, limit=count, strict=True, what=what)
    out = []
    for s in samples:
        ids = s.get("value")
        if s["kind"] != "input_ids":
            raise BadInput(
                f"{path}: prompt {s['id']!r}",
                'holds text; the tiny target has no tokenizer, give token ids ("input_ids": [...])',
            )
        if not ids or max(ids) >= vocab_size or min(ids) < 0:
            raise BadInput(f"{path}: prompt {s['id']!r}", f"token ids must lie in 0..{vocab_size - 1}")
        out.append((s["id"], list(ids)))
    if not out:
        raise BadInput(str(path), "holds no prompts")
    return out


def _greedy(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy answers of exactly `new_tokens` tokens for a left-padded batch."""
    import torch

    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return [row[width:].tolist() for row in out]


def _states(model, seqs: list[list[int]]):
    """Per sequence: every HF hidden state and the final state before the last norm (one right-padded batch)."""
    import torch

    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    pre = {}
    h = model.model.norm.register_forward_pre_hook(lambda _m, a: pre.__setitem__("x", a[0]))
    try:
        with torch.no_grad():
            out = model(ids, attention_mask=mask, output_hidden_states=True)
    finally:
        h.remove()
    return [([hs[i, : len(s)] for hs in out.hidden_states], pre["x"][i, : len(s)]) for i, s in enumerate(seqs)]


def refuse_used_folder(dump_dir: Path) -> None:
    """A sample dump goes into a new or empty folder: mixing it into another dump would mix targets."""
    if dump_dir.exists() and (not dump_dir.is_dir() or any(dump_dir.iterdir())):
        raise BadInput(f"--sample-dump {dump_dir}", "is not a new or empty folder; give another one")


def write_sample_dump(
    target: Path,
    dump_dir: Path,
    prompts_file: Path | None = None,
    samples: int = 64,
    new_tokens: int = 32,
    seed: int = 0,
    layers=None,
    quiet: bool = False,
) -> int:
    """Write what the dumping server would for `samples` prompts of `prompts_file` (default: seeded random
    token ids) into `dump_dir`; the number of samples written. `layers`: HF indices, or a DraftLayers (LAYOUT:N,
    as SGLANG_EAGLE3_EXT_DUMP_LAYERS takes it); None: the dump's default. Progress on stderr unless quiet."""
    import torch
    from transformers import DeepseekV3ForCausalLM

    refuse_used_folder(dump_dir)
    model = DeepseekV3ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    n_layers, vocab = int(model.config.num_hidden_layers), int(model.config.vocab_size)
    prompts = file_prompts(prompts_file, samples, vocab) if prompts_file else random_prompts(samples, vocab, seed)
    dump_dir.mkdir(parents=True, exist_ok=True)
    cfg = DumpConfig(str(dump_dir), layers if isinstance(layers, DraftLayers) else tuple(layers) if layers else None)
    layers = cfg.resolve_layers(n_layers)
    meta = build_meta(
        model,
        cfg,
        list(layers),
        {"tp_size": 1, "dp_size": 1, "attn_tp_size": 1, "pp_size": 1},
        StartupContext.from_server_args(None),
    )  # no server: no ServerArgs
    meta["dtype"] = "bfloat16"  # what the server runs the target in
    writer = make_writer(cfg, meta, "dp0")
    norm = (model.model.norm.weight.detach().bfloat16(), model.config.rms_norm_eps)
    done = 0
    try:
        with open(dump_dir / GENERATED_FILE, "a") if new_tokens else _nowhere() as gen:
            for start in range(0, len(prompts), BATCH):
                chunk = prompts[start : start + BATCH]
                answers = _greedy(model, [p for _, p in chunk], new_tokens) if new_tokens else [[] for _ in chunk]
                seqs = [p + a for (_, p), a in zip(chunk, answers)]
                for (rid, prompt), ids, (hidden, prenorm) in zip(chunk, seqs, _states(model, seqs)):
                    sid = sanitize_id(rid)
                    if new_tokens:
                        gen.write(json.dumps({"id": sid, "prompt_len": len(prompt), "len": len(ids)}) + "\n")
                    aux = torch.stack([hidden[k] for k in layers]).bfloat16()
                    n = len(ids)
                    batch = ChunkBatch(
                        [sid],
                        [0],
                        [n],
                        [n],
                        torch.tensor(ids),
                        aux,
                        "list",
                        pre=prenorm.bfloat16(),
                        nbytes=1,
                        norm=norm,
                    )
                    norm = None  # sent once per writer, as the capture does
                    writer.reserve(1)
                    writer.submit(batch)
                done += len(chunk)
                if not quiet:  # the stderr of the moment (a caller may have replaced it since import)
                    print(f"[sample-dump] {done}/{len(prompts)} samples", file=sys.stderr, flush=True)
        if not writer.flush(120):
            raise RuntimeError(f"the dump writer did not write every sample into {dump_dir} within 120 s")
    finally:
        writer.close()
    return done


class _nowhere:
    """A file that discards (no generated.jsonl without answers: the loss mask then covers every token)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, _text: str) -> None:
        pass
