"""The drafts as `train --dry-run` sizes them (training/plan.py), in arithmetic from the target's config alone:
nothing is built or run, so any size answers at once. Each route's plan step (training/<route>/plan.py: `step`)
first applies the settings checks its training run applies (the same functions), then counts:

- the draft's parameters from its shapes (tests/unit/training/test_train_plan.py holds them to the drafts the routes
  build);
- the activation peak of one micro-batch's forward, loss and backward, as bytes per element of each family of
  tensors the step keeps alive (the logits and their log-softmaxes per TTT step, the attention masks growing with
  the steps, the layers' inputs and outputs), for float32 on a CPU and bf16 autocast on CUDA. The figures are a
  least-squares fit to the step run on torch's meta device with every storage followed from creation to release,
  over random shapes (within 13 % of it from 64 tokens up); tests/unit/training/test_train_plan.py holds the plan within
  15 % of a measured run's peak, so a change to a step that moves its peak shows there. On CUDA the Llama route
  compiles its forward and fuses its loss, which keep less: an upper bound there (measured at Kimi-K2.5's width,
  8192 tokens, one H200: 60 GiB peak for 94 GiB planned; the MLA route: 50 GiB for 56 GiB planned);
- the floating-point work per token (6 per trained weight and token, 4 through a frozen head, 2 for the
  teacher's logits, plus attention), and from it the time per step at each route's rate measured on one H200 at
  Kimi-K2.5's width (docs/results.md, Training throughput).

This module holds what the steps share: element sizes, the reference width the rates were measured at, the
rate and the notes.
"""

from __future__ import annotations

F32, BF16 = 4, 2
CPU_TFLOPS = 0.05  # a CPU's order of magnitude: its time is a rough guide only

# the width each route's rate was measured at on one H200 (hidden 7168, vocab 163,840, 3 TTT steps; docs/results.md:
# the MLA route on 2048-token samples, the Llama route on 8192-token packed sequences; *_MEASURED in each plan.py)
KIMI = dict(hidden_size=7168, vocab_size=163840, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512)
KIMI.update(qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, intermediate_size=18432)
REF = dict(KIMI, num_hidden_layers=61, max_position_embeddings=262144, rms_norm_eps=1e-6)


def acts(table: dict, features: dict) -> int:
    return int(sum(table.get(k, 0.0) * v for k, v in features.items()))


def rate(measured: tuple[int, int], ref_flops, cuda: bool) -> float:
    """The effective TFLOP/s assumed: the route's rate measured on one H200 at Kimi-K2.5's width (CUDA), else
    CPU_TFLOPS."""
    if not cuda:
        return CPU_TFLOPS
    tok_s, T = measured
    return ref_flops(T) * tok_s / 1e12


def plan_notes(a, T: int, cuda: bool, compiled: bool = False) -> list[str]:
    """compiled: the route compiles the forward on CUDA, which the plan's figures do not count."""
    out = [f"activations: one micro-batch of {T} tokens, {a.ttt_steps} TTT steps, counted from the shapes"]
    if compiled and cuda:
        out.append(
            "counted as the eager step: speculators compiles the forward on CUDA (and its fused loss), which keeps "
            "less: an upper bound"
        )
    if a.optimizer != "adamw":
        out.append(
            f"optimizer state counted as AdamW's (two float32 values per trained weight); "
            f"--optimizer {a.optimizer} differs"
        )
    return out
