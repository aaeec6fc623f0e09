"""What the tutorial's dumping server writes, made on CPU for tests/unit/test_docs.py: SGLang does not serve on a
CPU, so `dump run` cannot reach a server there. Same target (transformers' DeepseekV3 on the tutorial's weights),
same layers (the preset's), same writer and file format as the server's (`dump.start.build_meta`,
`dump.start.make_writer`, one pure-prefill ChunkBatch per request); with `--generate`, greedy answers first and
their lengths in generated.jsonl, as `dump run` records them."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def preset_layers(preset: str) -> tuple[int, ...]:
    cfg = yaml.safe_load((REPO / "server_configs" / f"{preset}.yaml").read_text())
    return tuple(int(x) for x in cfg["eagle3_ext"]["dump_layers"])


def _prompts(path: Path, limit: int) -> list[tuple[str, list[int]]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append((str(rec["id"]), list(rec["input_ids"])))
        if len(out) == limit:
            break
    return out


def _greedy(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy answers of `new_tokens` tokens for a left-padded batch."""
    import torch

    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=0)
    return [row[width:].tolist() for row in out]


def _states(model, seqs: list[list[int]]):
    """Per sequence: its aux hidden states (every HF index) and its final state before the last norm; one
    right-padded batch (the MoE layers' per-expert loops run once, not once per sequence)."""
    import torch

    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    pre = {}
    h = model.model.norm.register_forward_pre_hook(lambda _m, a: pre.__setitem__("x", a[0]))
    try:
        with torch.no_grad():
            out = model(ids, attention_mask=mask, output_hidden_states=True)
    finally:
        h.remove()
    return [([hs[i, :len(s)] for hs in out.hidden_states], pre["x"][i, :len(s)]) for i, s in enumerate(seqs)]


def dump(target: Path, data: Path, dump_dir: Path, preset: str, generate: bool, new_tokens: int,
         limit: int) -> int:
    """Write what the server would for the first `limit` prompts; the number of samples written."""
    import torch
    from transformers import DeepseekV3ForCausalLM

    from sglang_eagle3_ext.dump.assemble import ChunkBatch
    from sglang_eagle3_ext.dump.config import GENERATED_FILE, DumpConfig
    from sglang_eagle3_ext.dump.manifest import sanitize_id
    from sglang_eagle3_ext.dump.start import build_meta, make_writer
    from sglang_eagle3_ext.server.startup import StartupContext

    model = DeepseekV3ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    layers = preset_layers(preset)
    dump_dir.mkdir(parents=True, exist_ok=True)
    cfg = DumpConfig(str(dump_dir), layers)
    meta = build_meta(model, cfg, list(layers), {"tp_size": 1, "dp_size": 1, "attn_tp_size": 1, "pp_size": 1},
                      StartupContext.from_server_args(None))      # no server: no ServerArgs
    meta["dtype"] = "bfloat16"                         # what the server runs the target in
    writer = make_writer(cfg, meta, "dp0")
    prompts = _prompts(data, limit)
    answers = _greedy(model, [p for _, p in prompts], new_tokens) if generate else [[] for _ in prompts]
    norm = (model.model.norm.weight.detach().bfloat16(), model.config.rms_norm_eps)
    seqs = [prompt + answer for (_, prompt), answer in zip(prompts, answers)]
    with open(dump_dir / GENERATED_FILE, "a") as gen:
        for (rid, prompt), ids, (hidden, prenorm) in zip(prompts, seqs, _states(model, seqs)):
            sid = sanitize_id(rid)
            if generate:
                gen.write(json.dumps({"id": sid, "prompt_len": len(prompt), "len": len(ids)}) + "\n")
            aux = torch.stack([hidden[k] for k in layers]).bfloat16()
            n = len(ids)
            batch = ChunkBatch([sid], [0], [n], [n], torch.tensor(ids), aux, "list", pre=prenorm.bfloat16(),
                               nbytes=1, norm=norm)
            norm = None                                # sent once per writer, as the capture does
            writer.reserve(1)
            writer.submit(batch)
    assert writer.flush(120), "the writer did not drain"
    writer.close()
    return len(prompts)
