"""The two drafts as `train --dry-run` sizes them (training/plan.py): each built on the meta device from the
target's config alone, its parameters counted, one training step traced (training/memory_trace.py).

On CUDA the step is traced with the draft in bf16, standing for autocast (bf16 activations; the float32 masters
are counted as weights, and autocast's bf16 copies of the matmul weights on top). The Llama route is traced
eagerly with speculators' eager loss: on CUDA speculators compiles the forward (torch.compile frees
intermediates sooner) and uses its fused loss, so the plan is an upper bound there (measured at Kimi-K2.5's
width, 8192 tokens, one H200: 60 GiB peak for 94 GiB planned; the MLA route: 50 GiB for 56 GiB planned).
"""

from __future__ import annotations

import contextlib

from .memory_trace import trace_step
from .mla.step import SELF_BIAS, step_loss
from .speculators.train import draft_layer_config

F32, BF16 = 4, 2


def _count(model) -> dict:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"total": total, "trainable": trainable, "frozen": total - trainable}


def _linear_weights(model) -> int:
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _buffer_bytes(model) -> int:
    return sum(b.numel() * b.element_size() for b in model.buffers())


def mla_step(a, tcfg: dict, K: int, T: int, device: str, world: int = 1) -> dict:
    """The MLA route (one process per rank, the draft replicated: DDP)."""
    import torch

    from ..draft.nets.mla import Eagle3MLADraft
    from .mla.train import mla_draft_config

    cfg = mla_draft_config(tcfg, list(range(1, K + 1)), a.intermediate_size)
    with torch.device("meta"):
        model = Eagle3MLADraft(cfg)
    model.embed_tokens.weight.requires_grad_(False)
    params, buffers = _count(model), _buffer_bytes(model)
    cuda = device.startswith("cuda")
    if cuda:
        model.to(torch.bfloat16)
    H, V = int(tcfg["hidden_size"]), int(tcfg["vocab_size"])
    head, norm = (
        torch.empty(V, H, dtype=torch.bfloat16, device="meta"),
        torch.empty(H, dtype=torch.bfloat16, device="meta"),
    )
    dtype = torch.bfloat16 if cuda else torch.float32

    def make():
        return (
            torch.zeros(T, dtype=torch.long, device="meta"),
            torch.empty(T, K + 1, H, dtype=torch.bfloat16, device="meta"),
        )

    def step(m, ids, hs):  # the warm-up's attention bias on: its float masks are the step's largest
        loss, _ = step_loss(
            m, ids, hs, head, norm, float(tcfg.get("rms_norm_eps") or 1e-6), a.ttt_steps, dtype, SELF_BIAS
        )
        loss.backward()

    traced = trace_step(model, make, step)
    tr = params["trainable"]
    weights = params["total"] * F32 + buffers + (V * H + H) * BF16 + (tr * BF16 if cuda else 0)
    return {
        "params": params,
        "notes": _notes(a, T, cuda),
        "bytes": {
            "weights": weights,
            "gradients": tr * F32,
            "optimizer": tr * F32 * 2,
            "activations": traced["activations"],
        },
    }


def _llama_model(a, tcfg: dict, K: int):
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    dc = draft_layer_config(
        tcfg,
        num_layers=a.num_layers,
        intermediate_size=a.intermediate_size,
        head_dim=a.head_dim,
        max_position_embeddings=a.max_position_embeddings,
    )
    lc = LlamaConfig(**dc)
    lc._attn_implementation = "sdpa"
    verifier = VerifierConfig(
        name_or_path=str(a.target), architectures=list(tcfg.get("architectures") or ["DeepseekV3ForCausalLM"])
    )
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=lc,
        draft_vocab_size=a.draft_vocab_size or int(tcfg["vocab_size"]),
        norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=list(range(1, K + 1)),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            default_proposal_method="greedy",
            verifier=verifier,
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=a.ttt_steps)],
        ),
    )
    with torch.device("meta"):
        return Eagle3DraftModel(config=cfg)


def llama_step(a, tcfg: dict, K: int, T: int, device: str, world: int) -> dict:
    """The Llama route (speculators' model; FSDP over the ranks when there are several)."""
    import torch
    from speculators.models.eagle3.core import Eagle3DraftModel

    model = _llama_model(a, tcfg, K)
    params, buffers = _count(model), _buffer_bytes(model)
    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    model.to(dtype)
    H = int(tcfg["hidden_size"])
    kw, _ = Eagle3DraftModel.get_trainer_kwargs(
        ttt_steps=a.ttt_steps, ttt_step_loss_decay=1.0, loss_fn=a.loss_fn or "kl_div", loss_implementation="eager"
    )

    def make():
        z = dict(device="meta")
        return (
            {
                "hidden_states": torch.empty(1, T, K * H, dtype=dtype, **z),
                "input_ids": torch.zeros(1, T, dtype=torch.long, **z),
                "document_ids": torch.zeros(1, T, dtype=torch.long, **z),
                "loss_mask": torch.ones(1, T, dtype=torch.bool, **z),
                "position_ids": torch.zeros(1, T, dtype=torch.long, **z),
                "verifier_last_hidden_states": torch.empty(1, T, H, dtype=dtype, **z),
            },
        )

    def step(m, batch):
        _, loss, _ = m(**batch, **kw)
        loss.backward()

    with _eager():
        traced = trace_step(model, make, step)
    tr, total = params["trainable"], params["total"]
    if world > 1:  # FSDP: every weight sharded; the root module (embeddings, heads, fc) and a layer gathered
        layer = max(sum(p.numel() for p in lyr.parameters()) for lyr in model.layers)
        gathered = (total - sum(p.numel() for p in model.layers.parameters()) + layer) * (BF16 if cuda else F32)
        weights = total * F32 // world + gathered + buffers
    else:
        weights = total * F32 + buffers + (_linear_weights(model) * BF16 if cuda else 0)
    return {
        "params": params,
        "notes": _notes(a, T, cuda, compiled=True),
        "bytes": {
            "weights": weights,
            "gradients": tr * F32 // world,
            "optimizer": tr * F32 * 2 // world,
            "activations": traced["activations"],
        },
    }


@contextlib.contextmanager
def _eager():
    """speculators compiles the draft's forward on a CUDA host; the trace needs it eager."""
    import torch

    stance = getattr(torch.compiler, "set_stance", None)
    with stance("force_eager") if stance else contextlib.nullcontext():
        yield


def _notes(a, T: int, cuda: bool, compiled: bool = False) -> list[str]:
    """compiled: the route compiles the forward on CUDA, which the eager trace does not."""
    out = [f"activations: one micro-batch of {T} tokens, {a.ttt_steps} TTT steps, traced on the meta device"]
    if compiled and cuda:
        out.append(
            "traced eagerly: speculators compiles the forward on CUDA (and its fused loss), which keeps "
            "less: an upper bound"
        )
    if a.optimizer != "adamw":
        out.append(
            f"optimizer state counted as AdamW's (two float32 values per trained weight); "
            f"--optimizer {a.optimizer} differs"
        )
    return out
