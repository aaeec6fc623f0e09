"""Small worlds for `eval`'s tests (imported as a plain module: tests/ is on sys.path): a target folder, Llama
drafts in SGLang's layout, and held-out data as a training export or a dump dir, whose answers are known.

The copying draft: o_proj and down_proj are zero, so its state is fc(target state) and stays so along the
chain; fc takes aux chunk 0 as is and its head row j reads coordinate HOT[j] (d2t maps draft id j to target
id HOT[j]). Fed `next2` states (chunk 0 = 3 * one-hot of x_{p+2}), draft token 1 at anchor a is x_{a+1} (right)
and every later token repeats it (wrong when the sequence never repeats a token): p = (1, 0, ...), accept 2.0.
Fed by a simulation that (wrongly) gave step 2 the target's state of row a, step 2 would read x_{a+2}: right.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from safetensors.torch import save_file

V = H = 32  # target vocab = hidden: tokens fit a one-hot state
K = 3
AUX = [1, 2, 3]
HOT = [2 * j + 1 for j in range(16)]  # the draft vocab: odd target ids (d2t = HOT[j] - j)


def write_target(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": V,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(0)
    save_file(
        {
            "model.embed_tokens.weight": torch.randn(V, H, generator=g),
            "lm_head.weight": torch.randn(V, H, generator=g),
            "model.norm.weight": torch.ones(H),
        },
        str(d / "model.safetensors"),
    )
    return d


def draft_config(hot=HOT, layers: int = 1, **over) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": 64,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": V,
        "draft_vocab_size": len(hot),
        "target_hidden_size": H,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": AUX,
            "hf_hidden_state_indices": AUX,
            "use_aux_hidden_state": True,
        },
        **over,
    }


def draft_tensors(hot=HOT, seed: int = 1, copy: bool = True, layers: int = 1, scale: float = 0.2) -> dict:
    g = torch.Generator().manual_seed(seed)

    def r(*s):
        return scale * torch.randn(*s, generator=g)

    t = {
        "norm.weight": torch.ones(H),
        "fc.weight": r(H, K * H),
        "lm_head.weight": r(len(hot), H),
        "d2t": torch.tensor(hot) - torch.arange(len(hot)),
    }
    for n in range(layers):
        w, p = (2 * H if n == 0 else H), f"layers.{n}."
        t.update(
            {
                p + "self_attn.q_proj.weight": r(32, w),
                p + "self_attn.k_proj.weight": r(16, w),
                p + "self_attn.v_proj.weight": r(16, w),
                p + "self_attn.o_proj.weight": r(H, 32),
                p + "mlp.gate_proj.weight": r(64, H),
                p + "mlp.up_proj.weight": r(64, H),
                p + "mlp.down_proj.weight": r(H, 64),
                p + "hidden_norm.weight": 1 + r(H) / 4,
                p + "post_attention_layernorm.weight": 1 + r(H) / 4,
            }
        )
        if n == 0:
            t[p + "input_layernorm.weight"] = 1 + r(H) / 4
    if copy:
        t["layers.0.self_attn.o_proj.weight"] = torch.zeros(H, 32)
        t["layers.0.mlp.down_proj.weight"] = torch.zeros(H, 64)
        t["fc.weight"] = torch.cat([torch.eye(H), torch.zeros(H, 2 * H)], 1)
        lm = torch.zeros(len(hot), H)
        lm[torch.arange(len(hot)), torch.tensor(hot)] = 10.0
        t["lm_head.weight"] = lm
    return t


def write_draft(d: Path, cfg: dict | None = None, tensors: dict | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg or draft_config()))
    save_file({k: v.contiguous() for k, v in (tensors or draft_tensors()).items()}, str(d / "model.safetensors"))
    return d


def sequences(n: int, seed: int = 0, lo: int = 8, hi: int = 30) -> list[list[int]]:
    """Token sequences over HOT with no token twice in a row."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ids = [rng.choice(HOT)]
        for _ in range(rng.randrange(lo, hi)):
            ids.append(rng.choice([h for h in HOT if h != ids[-1]]))
        out.append(ids)
    return out


def next2(ids: list[int], p: int, gen=None) -> torch.Tensor:
    """Aux states of row p: chunk 0 = 3 * one-hot(x_{p+2}); chunks 1, 2 noise the copying draft ignores."""
    v = torch.zeros(K * H) if gen is None else 0.3 * torch.randn(K * H, generator=gen)
    v[:H] = 0
    v[ids[min(p + 2, len(ids) - 1)]] = 3.0
    return v


def states(seqs, aux_fn=next2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.stack([aux_fn(ids, p, g) for p in range(len(ids))]) for ids in seqs]


def write_export(d: Path, seqs, target: Path | None, masks=None, aux_fn=next2, layers=AUX) -> Path:
    """hidden_states/hs_i.safetensors ([L, K+1, H]) + sge3_dump_meta.json; masks: an Arrow dataset beside."""
    (d / "hidden_states").mkdir(parents=True, exist_ok=True)
    for i, (ids, aux) in enumerate(zip(seqs, states(seqs, aux_fn))):
        hs = torch.cat([aux.view(len(ids), K, H), torch.zeros(len(ids), 1, H)], 1)
        save_file(
            {"token_ids": torch.tensor(ids), "hidden_states": hs}, str(d / "hidden_states" / f"hs_{i}.safetensors")
        )
    meta = {"layer_indices_hf": list(layers)}
    if target is not None:
        meta["model_path"] = str(target)
    (d / "sge3_dump_meta.json").write_text(json.dumps(meta))
    if masks is not None:
        import datasets

        datasets.Dataset.from_dict(
            {"input_ids": seqs, "loss_mask": masks, "seq_len": [len(s) for s in seqs]}
        ).save_to_disk(str(d))
    return d


def write_dump(d: Path, seqs, target: Path, prompt_lens: list[int], aux_fn=next2) -> Path:
    """A dump dir as `dump run --generate` leaves it: dump_meta.json, one sample file each, the manifest,
    generated.jsonl (the response region of each sample)."""
    from sglang_eagle3_ext.dump.manifest import sample_relpath
    from sglang_eagle3_ext.dump.sample_file import T_AUX, T_IDS, T_PRE, write_sample

    d.mkdir(parents=True, exist_ok=True)
    (d / "dump_meta.json").write_text(
        json.dumps(
            {
                "format": "sge3_dump",
                "format_version": 1,
                "layer_indices_hf": AUX,
                "final": "prenorm",
                "hidden_size": H,
                "num_hidden_layers": 4,
                "vocab_size": V,
                "model_path": str(target),
                "dtype": "float32",
            }
        )
    )
    (d / "manifests").mkdir(exist_ok=True)
    lines, gen = [], []
    for i, (ids, aux) in enumerate(zip(seqs, states(seqs, aux_fn))):
        sid = f"s{i:03d}"
        rel = sample_relpath(sid)
        write_sample(
            d / rel, {T_IDS: torch.tensor(ids), T_AUX: aux.float(), T_PRE: torch.zeros(len(ids), H)}, {"id": sid}
        )
        lines.append(json.dumps({"id": sid, "file": rel, "num_tokens": len(ids)}))
        gen.append(json.dumps({"id": sid, "prompt_len": prompt_lens[i], "len": len(ids)}))
    (d / "manifests" / "dp0.jsonl").write_text("\n".join(lines) + "\n")
    (d / "generated.jsonl").write_text("\n".join(gen) + "\n")
    return d


def eval_world(root: Path, n: int) -> dict:
    """A tiny target, `n` sequences exported from it and a draft: what the eval tests read."""
    target = write_target(root / "target")
    seqs = sequences(n)
    return {
        "root": root,
        "target": target,
        "seqs": seqs,
        "draft": write_draft(root / "draft"),
        "export": write_export(root / "export", seqs, target),
    }
