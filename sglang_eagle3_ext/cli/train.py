"""Train a small EAGLE-3 draft with the speculators library from offline hidden-state files.

    python -m sglang_eagle3_ext.train_draft --data DIR --target TARGET_DIR --out OUT \\
        [--epochs N] [--steps N] [--lr LR] [--device cuda|cpu] [--layer-ids 1,2,3] \\
        [--draft-vocab-size N] [--total-seq-len N] [--ttt-steps N] [--optimizer muon|adamw]

How it trains: with speculators' **own trainer**.  ``speculators.train.cli.main`` (what
``speculators train`` runs) is called with a ``TrainConfig`` resolved from its own flag parser,
so model construction (``Eagle3DraftModel.from_training_args`` + ``load_verifier_weights``),
the vocab mapping (``parse_vocab_mappings`` -> ``build_vocab_mappings_from_distribution``), the
data pipeline (``ArrowDataset`` + ``FileTransfer`` + ``shift_batch`` + multipack sampler), the
losses (``speculators.losses``) and the ``Trainer`` loop are all speculators' code.  It runs
offline on one GPU without vLLM: the hidden states already exist as files, and
``--on-missing raise`` means no sample ever triggers on-demand generation.

What speculators needs besides the ``hs_{i}.safetensors`` files, and how this module supplies it:

* an Arrow dataset (``datasets.load_from_disk(data_path)``) with ``input_ids``, ``loss_mask``
  and ``seq_len`` whose row i matches ``hs_i`` (it checks the token ids).  Built here from
  the files' ``token_ids`` in ``OUT/_speculators_run/data``; the loss mask is taken from an
  Arrow dataset already in DIR (as ``python -m sglang_eagle3_ext.dump`` exports it) when its
  token ids match, else all ones.  ``--hidden-states-path`` points at the files in place.
* the verifier (``--verifier-name-or-path`` = TARGET_DIR): its config (vocab, hidden size,
  layer count) and three tensors ``embed_tokens.weight``, ``lm_head.weight``,
  ``model.norm.weight`` (speculators reads them by suffix; the target's last-slot state is
  normed with ``model.norm`` and projected with ``lm_head`` to get the teacher distribution).
  No tokenizer is needed because ``--mask-token-id 0`` is passed (EAGLE-3 does not use it).
* for ``--draft-vocab-size`` < the target vocab: a token-frequency file ``token_freq.pt``
  (counted here over the loss-masked ``token_ids``); speculators' own ``_generate_vocab_mappings``
  turns it into ``d2t``/``t2d`` (top-N most frequent tokens).  With the full vocab speculators
  stores no ``d2t``/``t2d`` at all (``use_draft_vocab`` is False): the converter must treat a
  missing mapping as the identity.
* the layer ids (``eagle_aux_hidden_state_layer_ids``, HF ``output_hidden_states`` indices):
  ``--layer-ids``, else a metadata json in DIR (``metadata.json``/``sge3_dump_meta.json``/
  ``dump_meta.json``, keys ``hf_hidden_state_indices``/``layer_indices_hf``/...), else
  speculators' default ``[2, n//2, n-3]``; checked against the files' slot count.

Small adaptations, all outside the math (a ``Trainer`` subclass swapped in for the call, see
training/speculators_patches.py):

* ``Trainer.setup_model`` does ``model.to(local_rank)`` (an int -> an accelerator) and its step
  timer calls ``torch.accelerator.synchronize()``; both raise on a CPU-only torch.  On CPU the
  model is placed on ``cpu`` first and ``synchronize`` is a no-op for the duration of the call
  (restored afterwards).  Nothing changes on CUDA.
* ``--steps`` is mapped onto whole epochs (the stock loop with ``max_steps`` and too many
  epochs still runs one step per remaining epoch); per-epoch checkpoints are only written after
  the first and last epoch (``--keep-checkpoints`` keeps them under ``OUT/_speculators_run``).
* progress is printed from speculators' own metric records (``speculators.metrics`` logger):
  step, loss (summed over the TTT steps), accuracy per TTT step (``full_acc_k``), tokens/s;
  the final ``DONE`` line reports ``train_acc`` = mean ``full_acc_0`` over the last 10% of steps
  (plus the validation accuracy of the last epoch).  ``OUT/_speculators_run/summary.json``
  keeps the numbers.
* the final model is written to OUT by the model's own ``save_pretrained`` with a bf16 state
  dict, exactly as speculators' ``SingleGPUCheckpointer`` writes its epoch checkpoints
  (``architectures`` is ``["Eagle3DraftModel"]``, the 0.9 class name; the format marker is
  ``speculators_model_type: eagle3``).  ``Eagle3DraftModel.from_pretrained(OUT)`` reloads it.
* The draft decoder config is written here (``--draft-config``) instead of being synthesized by
  speculators from the verifier: the synthesized one copies DeepSeek's MoE/YaRN settings and
  makes every layer sliding-window (2048), which SGLang's Llama EAGLE-3 draft does not have.
  Ours: Llama, hidden = target hidden, 1 layer, full attention, head_dim 128 (64 if it does
  not divide), plain RoPE with the target's ``rope_theta``, ``max_position_embeddings`` =
  max(target's, 8192) (a 2048 clamp is a known acceptance collapse).  The draft options that
  SGLang lacks or only some releases have are off: ``norm_before_residual`` (SGLang never has
  it), ``norm_before_fc``, ``fc_norm``, ``norm_output`` -- a classic EAGLE-3 head every
  supported release serves.

``--draft-arch mla`` trains SGLang's MLA EAGLE-3 layout for DeepSeek/Kimi targets
(``Eagle3DeepseekV2ForCausalLM``) with our own loop instead (training/mla_train.py: a PyTorch twin of
SGLang's class, same loss kind, checkpoint in the layout SGLang's load_weights reads). A Kimi-K2.5 wrapper
target (``model_type: kimi_k25``) works for both: its ``text_config`` is the target config, and speculators
gets a verifier view of it (training/target_view.py).

What is refused before training, by name: an ``--out`` that is a symlink, is or holds or lies inside
``--target``/``--data``, or holds anything but an earlier output of train (that one only with ``--force``;
outdir.py: the output is built beside OUT and renamed into place); a sample file that is not finite,
integer token ids in the target's vocab and states ``[L, K+1, H]`` (training/samples.py, every file is read
once first); a target whose embed / lm_head / norm are not finite. A run whose draft weights end non-finite
saves nothing.

CPU runs (tests): fp32 hidden states (autocast is CUDA-only), SDPA attention (flex attention
and the Triton fused loss are GPU paths), eager loss.  GPU defaults: bf16, speculators'
``simple_flex_attention``, fused (Triton) loss, ``torch.compile`` of the forward (speculators
does that itself whenever CUDA is available).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# the data side (shared with the MLA trainer) lives in training/data.py; re-exported for callers and tests
from ..training.data import (
    META_FILES,
    META_KEYS,
    TrainDraftError,
    _existing_loss_masks,
    _say,
    find_hs_dir,
    list_hs_files,
    parse_layer_ids,
    prepare_data,
    read_layer_ids_from_metadata,
    require_learned,
)
from ..training.speculators_run import _run_speculators, _summarize, build_argv  # noqa: F401 (re-exported)
from .common import non_negative_int, positive_int

RUN_DIR = "_speculators_run"
# what a train --out held before outputs carried outdir.MARKER: replaceable with --force
_LEGACY_OUTPUT = {"config.json", "model.safetensors", RUN_DIR, "train_summary.json", "generation_config.json"}


def _legacy_output(d: Path) -> bool:
    names = {p.name for p in d.iterdir()}
    return {"config.json", "model.safetensors"} <= names and bool(names & {RUN_DIR, "train_summary.json"}) \
        and names <= _LEGACY_OUTPUT


def output_rule(a) -> dict:
    """How train writes --out (outdir.py): never into or around its inputs; an earlier output only with --force."""
    return dict(tool="train", flag="--out", inputs=[("target (--target)", a.target), ("data (--data)", a.data)],
                replace=bool(getattr(a, "force", False)), legacy=_legacy_output)


# ----------------------------------------------------------------------------- draft config

def draft_layer_config(target_cfg: dict, *, num_layers: int = 1, intermediate_size: int | None = None,
                       head_dim: int | None = None, num_kv_heads: int | None = None,
                       max_position_embeddings: int | None = None) -> dict:
    """A plain Llama decoder config for the draft (see the module docstring for the choices)."""
    hidden = int(target_cfg["hidden_size"])
    if head_dim is None:
        head_dim = next((d for d in (128, 64) if hidden % d == 0), None)
        if head_dim is None:
            heads = int(target_cfg.get("num_attention_heads") or 1)
            head_dim = hidden // heads
    if hidden % head_dim:
        raise TrainDraftError(f"head_dim {head_dim} does not divide hidden_size {hidden}")
    heads = hidden // head_dim
    kv = num_kv_heads or heads
    if heads % kv:
        raise TrainDraftError(f"num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    inter = intermediate_size or int(target_cfg.get("intermediate_size") or 3 * hidden)
    rope_theta = float(target_cfg.get("rope_theta")
                       or (target_cfg.get("rope_parameters") or {}).get("rope_theta") or 10000.0)
    mpe = max_position_embeddings or max(int(target_cfg.get("max_position_embeddings") or 0), 8192)
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "vocab_size": int(target_cfg["vocab_size"]), "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": num_layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "head_dim": head_dim, "hidden_act": "silu", "max_position_embeddings": mpe,
        "initializer_range": float(target_cfg.get("initializer_range") or 0.02),
        "rms_norm_eps": float(target_cfg.get("rms_norm_eps") or 1e-6),
        "rope_theta": rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "rope_scaling": None, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": None, "layer_types": ["full_attention"] * num_layers,
        "pad_token_id": None,
    }


# ----------------------------------------------------------------------------- training

def train(a) -> dict:
    from ..files import outdir

    outdir.check(a.out, **output_rule(a))           # before anything is read or written
    if getattr(a, "draft_arch", "llama") == "mla":   # our own trainer (training/mla_train.py): no speculators
        from ..training.mla_train import train_from_args

        return train_from_args(a)
    try:
        import speculators  # noqa: F401
        from speculators.train import cli as spec_cli
        from speculators.train.config import TrainConfig
    except ImportError as e:  # pragma: no cover - environment problem
        raise TrainDraftError(f"the speculators library is needed (pip install speculators): {e}") from e
    import torch

    data, target, out = Path(a.data), Path(a.target), Path(a.out)
    rule = output_rule(a)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainDraftError("--device cuda but torch sees no CUDA device")
    if device == "cpu" and torch.cuda.is_available():
        _say("note: --device cpu on a CUDA host: speculators still compiles its forward for CUDA hosts")
    from ..training.target_view import is_wrapper, read_tensors, text_config, verifier_view

    target_cfg = text_config(target)     # a Kimi-K2.5 wrapper: its language model's config
    vocab = int(target_cfg["vocab_size"])
    n_target_layers = int(target_cfg["num_hidden_layers"])

    hs_dir = find_hs_dir(data)
    hs_files = list_hs_files(hs_dir)
    layer_ids, src = _resolve_layer_ids(a, data, target, n_target_layers, is_wrapper(target))
    dvs = a.draft_vocab_size
    if dvs is not None and (dvs <= 0 or dvs > vocab):
        raise TrainDraftError(f"--draft-vocab-size {dvs} must be in [1, {vocab}]")
    if dvs == vocab:
        dvs = None   # full vocab: speculators keeps no mapping
    try:
        read_tensors(target)             # the teacher's embed / lm_head / norm: present and finite
    except ValueError as e:
        raise TrainDraftError(str(e)) from e

    result: dict = {"device": device, "layer_ids": layer_ids, "draft_vocab_size": dvs or vocab}
    with outdir.writing(out, **rule, record={"arch": "llama", "target": str(target), "data": str(data)}) as tmp:
        run = tmp / RUN_DIR
        prep = run / "data"
        t0 = time.perf_counter()
        info = prepare_data(data, hs_files, prep, len(layer_ids) + 1, vocab, int(target_cfg["hidden_size"]),
                            f"{len(layer_ids)} aux layers {layer_ids} ({src}) + the final state")
        result.update(info)
        if info["n_samples"] < 2:
            raise TrainDraftError("need at least 2 samples (speculators holds out a validation split)")
        _say(f"data: {info['n_samples']} samples, {info['n_tokens']} tokens ({info['n_loss_tokens']} in the loss), "
             f"{info['n_slots'] - 1} aux layers {layer_ids} ({src}) + final; "
             f"checked and prepared in {time.perf_counter() - t0:.1f}s")
        cfg_path = run / "draft_config.json"
        dcfg = draft_layer_config(target_cfg, num_layers=a.num_layers, intermediate_size=a.intermediate_size,
                                  head_dim=a.head_dim, max_position_embeddings=a.max_position_embeddings)
        cfg_path.write_text(json.dumps(dcfg, indent=2))
        a.target = str(verifier_view(target, run / "verifier"))   # speculators reads a top-level text config
        progress = _run_speculators(a, spec_cli, TrainConfig, prep=prep, hs_dir=hs_dir, run=run, out=tmp,
                                    layer_ids=layer_ids, cfg_path=cfg_path, dvs=dvs, device=device, result=result)
        result["saved"] = str(out)
        _summarize(a, result, progress, run)
    va = result["val"] or {}
    _say(f"DONE steps={result['steps']} train_acc={result['train_acc']:.4f} "
         f"(ttt accs {' '.join(f'{x:.3f}' for x in result['train_acc_by_step'])}, mean of last "
         f"{result['tail_steps']} steps) loss {_num(result['first_loss']):.4f}->{result['final_loss']:.4f} "
         f"val_acc={va.get('full_acc_0_epoch', float('nan')):.4f} "
         f"avg_tok/s={result['tokens_per_s']:.0f} time={result.get('train_seconds', 0):.1f}s out={out}")
    require_learned(va.get("full_acc_0_epoch"), a.min_val_acc, out)
    return result


def _num(x) -> float:
    return float("nan") if x is None else x


def _resolve_layer_ids(a, data: Path, target: Path, n_target_layers: int, wrapper: bool) -> tuple[list[int], str]:
    layer_ids, src = parse_layer_ids(a.layer_ids), "--layer-ids"
    if layer_ids is None:
        layer_ids, src = read_layer_ids_from_metadata(data)
    if layer_ids is None and wrapper:
        n = n_target_layers
        layer_ids, src = [2, n // 2, n - 3], "speculators' default [2, n//2, n-3]"
    if layer_ids is None:
        from speculators.models.utils import resolve_target_layer_ids

        layer_ids, src = resolve_target_layer_ids(None, str(target)), "speculators default [2, n//2, n-3]"
    if len(set(layer_ids)) != len(layer_ids) or min(layer_ids) < 0 or max(layer_ids) > n_target_layers:
        raise TrainDraftError(f"layer ids {layer_ids} ({src}) must be distinct HF hidden_states indices in "
                              f"[0, {n_target_layers}]")
    return layer_ids, src


DEFAULT_EPOCHS = 10


def _number_in(low: float, high: float):
    """argparse type: a finite number in (low, high] (argparse names the flag)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not (low < v <= high and v != float("inf")):
            what = f"in ({low:g}, {high:g}]" if high != float("inf") else f"> {low:g}"
            raise argparse.ArgumentTypeError(f"expected a finite number {what}, got {text!r}")
        return v
    return parse


positive_number, _ratio = _number_in(0.0, float("inf")), _number_in(0.0, 1.0)


def build_parser() -> argparse.ArgumentParser:
    from . import common as cli_common

    p = cli_common.parser("train", cli_common.doc_description(__doc__))
    p.add_argument("--data", required=True, help="dir with hs_{i}.safetensors (or DIR/hidden_states/ with them)")
    p.add_argument("--target", required=True, help="the target's local HF directory (config + safetensors)")
    p.add_argument("--out", required=True, help="where the speculators Eagle3 checkpoint is written (a new or empty "
                   "directory, or an earlier output of train with --force)")
    p.add_argument("--force", action="store_true", help="replace --out when it holds an earlier output of train")
    p.add_argument("--epochs", type=positive_int, default=None,
                   help=f"default {DEFAULT_EPOCHS} (or as many as --steps needs)")
    p.add_argument("--steps", type=positive_int, default=None, help="stop after this many optimizer steps")
    p.add_argument("--lr", type=positive_number, default=1e-3, help="peak learning rate")
    p.add_argument("--optimizer", choices=("muon", "adamw"), default="adamw", help="speculators optimizer")
    p.add_argument("--scheduler", choices=("linear", "cosine", "none"), default="cosine",
                   help="learning-rate schedule after warm-up")
    p.add_argument("--warmup-steps", type=non_negative_int, default=None, help="default: speculators' own")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--draft-arch", choices=("llama", "mla"), default="llama",
                   help="llama: speculators' Eagle3 (LlamaForCausalLMEagle3); mla: SGLang's MLA EAGLE-3 draft for "
                        "DeepSeek/Kimi targets (Eagle3DeepseekV2ForCausalLM), trained by training/mla_train.py")
    p.add_argument("--layer-ids", default=None,
                   help="aux HF hidden_states indices, e.g. 1,2,3 (default: DIR metadata, else speculators' default)")
    p.add_argument("--draft-vocab-size", type=positive_int, default=None, help="default: the target's full vocab")
    p.add_argument("--num-layers", type=positive_int, default=1, help="draft decoder layers")
    p.add_argument("--intermediate-size", type=positive_int, default=None,
                   help="default: the target's intermediate_size")
    p.add_argument("--head-dim", type=positive_int, default=None,
                   help="default: 128 (64 if 128 does not divide hidden)")
    p.add_argument("--max-position-embeddings", type=positive_int, default=None, help="default: max(target's, 8192)")
    p.add_argument("--ttt-steps", type=positive_int, default=3, help="training-time-test unroll steps (EAGLE-3)")
    p.add_argument("--total-seq-len", type=positive_int, default=8192, help="tokens per packed batch")
    p.add_argument("--train-ratio", type=_ratio, default=0.95, help="the rest is speculators' validation split")
    p.add_argument("--loss-fn", default=None, help="speculators loss spec (default: its kl_div)")
    p.add_argument("--loss-impl", choices=("fused", "eager"), default="fused", help="GPU only; CPU uses eager")
    p.add_argument("--attn-impl", choices=("simple_flex_attention", "sdpa", "eager"),
                   default="simple_flex_attention", help="GPU only; CPU uses sdpa")
    p.add_argument("--num-workers", type=non_negative_int, default=4,
                   help="speculators DataLoader workers (0 = in-process)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    p.add_argument("--log-every", type=positive_int, default=10, help="print metrics every N steps")
    p.add_argument("--min-val-acc", type=float, default=0.05,
                   help="exit non-zero when the draft's validation accuracy is at or below this (0 = never)")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help=f"keep speculators' per-epoch checkpoints under OUT/{RUN_DIR}/checkpoints")
    cli_common.add_json_out(p, "the run's summary (steps, losses, accuracies, where the draft went)")
    cli_common.add_verbosity(p, quiet="of the per-step lines only the first and the last one (the trainer's "
                                      "epoch bar stays)",
                             verbose="also show speculators', transformers' and torch's logs, warnings and bars")
    return p


def main(argv: list[str] | None = None) -> int:
    import contextlib

    from . import common as cli_common
    from .output import library_output

    a = cli_common.finish(build_parser(), "train").parse_args(argv)
    if a.quiet:
        a.log_every = 10 ** 9   # progress prints the first and the last step whatever the interval
    try:   # with --json on stdout, the run's own lines go to stderr
        with contextlib.redirect_stdout(sys.stderr if a.json == "-" else sys.stdout), \
                library_output(a.verbose, bars=True):
            result = train(a)
    except TrainDraftError as e:   # names the input and the fix
        print(cli_common.error_line("train", str(e)), file=sys.stderr)
        return cli_common.EXIT_BAD_INPUT
    if a.json:
        cli_common.write_json(a.json, result)
    return 0


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("train", main))
