"""Load time of an EAGLE-3 draft through the real SGLang class (on CUDA when present, else CPU): strict (patched) / plain.

    python benchmarks/bench_load.py [--hidden 2048] [--vocab 32000] [--draft-vocab 16000] [--repeats 7] [--kimi]

Builds a random SGLang-format draft (bf16) once, then alternates plain and strict loads of the same
files through SGLang's own safetensors iterator into one model instance; prints medians and the
ratio (goal <= 1.05).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_draft(out: Path, hidden: int, vocab: int, draft_vocab: int) -> Path:
    import torch
    from safetensors.torch import save_file

    from sglang_eagle3_ext.draft import keys, rules
    from sglang_eagle3_ext.draft.arch import llama

    heads = hidden // 128
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 4),
        "head_dim": 128,
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab,
        "target_hidden_size": hidden,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": [2, 4, 6],
            keys.HF_INDICES_FIELD: [2, 4, 6],
            "use_aux_hidden_state": True,
        },
    }
    layout = keys.installed_layout()
    spec, _ = rules.spec_from_config(cfg, layout)
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, shape in rules.expected_shapes(spec).items():
        if name in ("embed_tokens.weight",):
            continue
        if name == "d2t":
            hot = torch.sort(torch.randperm(vocab, generator=g)[:draft_vocab]).values
            tensors[name] = hot - torch.arange(draft_vocab)
        elif name == "t2d":
            tensors[name] = torch.zeros(vocab, dtype=torch.bool)
        else:
            tensors[llama.to_release(name, layout)[0]] = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def init_sglang(draft: Path, target: Path):
    """One CPU process as SGLang's scheduler would be (same steps as tests/conftest.py)."""
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.server_args import ServerArgs

    from sglang_eagle3_ext.versions import capabilities

    sa = ServerArgs(model_path=str(target), device="cpu", skip_tokenizer_init=True)
    sa.speculative_draft_model_path = str(draft)
    try:
        from sglang.srt.runtime_context import SpawnRanks, publish

        publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    except ImportError:
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(sa)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ps.init_distributed_environment(
        backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}"
    )
    ps.initialize_model_parallel(**({} if capabilities().HAS_RUNTIME_CONTEXT else {"tensor_model_parallel_size": 1}))
    import sglang.srt.layers.rotary_embedding.base as rb

    rb._is_cpu = True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--draft-vocab", type=int, default=16000)
    ap.add_argument(
        "--kimi",
        action="store_true",
        help="the size users load: Kimi-K2.5's draft (hidden 7168, "
        "vocab 163840, draft vocab 32000; ~1.6 GB bf16); the fixed per-load cost of the checks "
        "weighs less than at the default size",
    )
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument(
        "--device",
        default="auto",
        help="where the draft's parameters live: cuda (as when serving), "
        "cpu, or auto = cuda if available. On CPU the NaN/Inf scan is a second full read of the weights",
    )
    a = ap.parse_args()
    if a.kimi:
        a.hidden, a.vocab, a.draft_vocab = 7168, 163840, 32000
    import torch
    from transformers import AutoConfig

    import sglang_eagle3_ext
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    with tempfile.TemporaryDirectory() as tmp:
        draft = make_draft(Path(tmp) / "draft", a.hidden, a.vocab, a.draft_vocab)
        size = os.path.getsize(draft / "model.safetensors") / 2**20
        from sglang_eagle3_ext.tiny.llama_draft import write_target_config

        target = write_target_config(Path(tmp) / "target", hidden=a.hidden, vocab=a.vocab, layers=61)
        init_sglang(draft, target)
        from sglang.srt.models.registry import ModelRegistry

        torch.set_default_dtype(torch.bfloat16)
        dev = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
        with torch.device(dev):
            model = ModelRegistry.resolve_model_cls(["LlamaForCausalLMEagle3"])[0](AutoConfig.from_pretrained(draft))
        from sglang_eagle3_ext.in_server.draft.loader import VALUE_SCAN_ENV

        times = {"plain": [], "strict": [], "strict_noscan": []}
        for i in range(a.repeats + 1):  # first round warms the page cache, not counted
            for mode in times:
                (sglang_eagle3_ext.revert if mode == "plain" else lambda: sglang_eagle3_ext.apply(["draft"]))()
                os.environ[VALUE_SCAN_ENV] = "0" if mode == "strict_noscan" else "1"
                t0 = time.perf_counter()
                model.load_weights(sglang_weights_iterator(draft))
                if dev == "cuda":
                    torch.cuda.synchronize()
                if i:
                    times[mode].append(time.perf_counter() - t0)
        # min over rounds: the least disturbed run of each (shared CI machines are noisy)
        plain, strict, noscan = (min(times[k]) for k in ("plain", "strict", "strict_noscan"))
        print(
            f"draft hidden {a.hidden}, vocab {a.vocab}/{a.draft_vocab}, {size:.0f} MiB bf16, "
            f"device {dev}, torch threads {torch.get_num_threads()}"
        )
        print(
            f"plain  load: {plain * 1000:8.1f} ms (best of {a.repeats}; median {statistics.median(times['plain']) * 1000:.1f})"
        )
        print(f"strict load: {strict * 1000:8.1f} ms")
        print(f"strict load without the NaN/Inf value scan ({VALUE_SCAN_ENV}=0): {noscan * 1000:8.1f} ms")
        print(f"ratio strict/plain: {strict / plain:.3f}  (goal <= 1.05); without value scan: {noscan / plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
