"""Run SGLang's own MLA EAGLE-3 draft class (models/kimi_k25_eagle3.py) on CPU for tests.

Only the attention kernel is replaced: `RefAttention` is an exact causal softmax attention in torch standing in
for the CUDA backend SGLang would call through RadixAttention; the KV-cache store is a no-op (one extend from
an empty cache reads nothing back). Everything else -- the fused qkv-a projection, norms, YaRN RoPE, MLA
up-projections, MLP, fc, load_weights -- is SGLang's code. SGLang's CPU RoPE factory only builds YaRN, so
configs here carry a YaRN rope_scaling (Kimi-K2.5's own kind). MLA_TARGET, write_mla_target_config and
random_mla_draft: a small target and a seeded draft of ours for it, which the equivalence tests run.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

YARN = {
    "rope_type": "deepseek_yarn",
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 128,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
# a DeepSeek-V3 target small enough for CPU (its config.json keys) and the HF layers its MLA drafts read
MLA_TARGET = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=6,
    num_attention_heads=4,
    q_lora_rank=48,
    kv_lora_rank=32,
    qk_rope_head_dim=16,
    qk_nope_head_dim=32,
    v_head_dim=24,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=512,
    rope_scaling=YARN,
)
MLA_AUX = [1, 3, 5]


def write_mla_target_config(folder: Path) -> Path:
    """folder/config.json of MLA_TARGET as a DeepSeek-V3 model (no weights); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(
        json.dumps({**MLA_TARGET, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"})
    )
    return folder


def random_mla_draft(target_cfg: dict, out: Path) -> Path:
    """Our MLA draft for `target_cfg` and MLA_AUX, saved as train saves it, its weights drawn from seed 0: norms
    away from 1, projections at a scale where attention is not flat."""
    from sglang_eagle3_ext.draft.arch.mla.net import Eagle3MLADraft
    from sglang_eagle3_ext.training.mla.train import mla_draft_config, save_checkpoint

    cfg = mla_draft_config(target_cfg, MLA_AUX)
    torch.manual_seed(0)
    m = Eagle3MLADraft(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.08 * torch.randn_like(p))
    return save_checkpoint(m, cfg, out)


class RefAttention:
    """Stands in for the attention backend object (forward_batch.attn_backend / forward context)."""

    prefill_attention_backend_str = "triton"
    decode_attention_backend_str = "triton"
    req_to_token_pool = None

    class token_to_kv_pool:
        @staticmethod
        def set_kv_buffer(*a, **k):
            pass

        set_mla_kv_buffer = set_kv_buffer

    def forward(self, q, k, v, layer, fb, save_kv_cache=True, **kw):
        T, H = q.shape[0], layer.tp_q_head_num
        q, k, v = q.view(T, H, -1), k.view(T, -1, k.shape[-1]), v.view(T, -1, v.shape[-1])
        k, v = k.expand(T, H, k.shape[-1]), v.expand(T, H, v.shape[-1])
        out = torch.zeros(T, H, v.shape[-1], dtype=torch.float32)
        start = 0
        for n in fb.extend_seq_lens_cpu:
            sl = slice(start, start + n)
            s = torch.einsum("thd,shd->hts", q[sl].float(), k[sl].float()) * layer.scaling
            s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
            out[sl] = torch.einsum("hts,shd->thd", s, v[sl].float())
            start += n
        return out.to(q.dtype).reshape(T, -1)


def use_reference_attention(monkeypatch):
    """0.5.16+: the backend is read from the forward context; older releases read forward_batch.attn_backend.
    The context is set through monkeypatch, so it ends with the test: a context left behind makes later tests
    that build models fail SGLang's own "called inside a forward" checks (0.5.18+)."""
    backend = RefAttention()
    try:
        from sglang.srt.model_executor import forward_context
    except ImportError:
        return backend
    monkeypatch.setattr(forward_context, "_current", forward_context.ForwardContext(attn_backend=backend))
    return backend


def extend_batch(input_ids: torch.Tensor, seq_lens: list[int], spec_hidden: torch.Tensor, backend):
    """A pure-EXTEND ForwardBatch from an empty cache carrying the target states as spec_info."""
    import types

    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    T, bs = int(input_ids.shape[0]), len(seq_lens)
    positions = torch.cat([torch.arange(n) for n in seq_lens])
    lens = torch.tensor(seq_lens)
    fb = ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        batch_size=bs,
        input_ids=input_ids,
        req_pool_indices=torch.arange(bs),
        seq_lens=lens,
        out_cache_loc=torch.arange(T),
        seq_lens_sum=T,
        positions=positions,
        extend_seq_lens_cpu=list(seq_lens),
        extend_prefix_lens_cpu=[0] * bs,
        extend_seq_lens=lens,
        extend_prefix_lens=torch.zeros_like(lens),
        extend_start_loc=torch.cumsum(lens, 0) - lens,
        spec_info=types.SimpleNamespace(hidden_states=spec_hidden),
    )
    fb.attn_backend = backend
    fb.capture_hidden_mode = CaptureHiddenMode.FULL
    fb.return_logprob = False
    return fb, positions


def init_dp_attention(sa, mc) -> None:
    """What the scheduler does before building a model: DP-attention state (0.5.23 takes the server args
    only and sizes the gathered buffer from the model config separately)."""
    import inspect

    from sglang.srt.layers import dp_attention as dpa

    if len(inspect.signature(dpa.initialize_dp_attention).parameters) >= 2:
        dpa.initialize_dp_attention(sa, mc)
        return
    dpa.initialize_dp_attention(sa)
    if hasattr(dpa, "init_dp_gathered_buffer"):
        dpa.init_dp_gathered_buffer(mc)
