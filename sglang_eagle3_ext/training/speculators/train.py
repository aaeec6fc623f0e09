"""The Llama route of draft training (`TrainOptions.draft_arch == "llama"`): a small EAGLE-3 draft trained by
the speculators library's own trainer from offline hidden-state files.

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
training/speculators/patches.py):

* ``Trainer.setup_model`` does ``model.to(local_rank)`` (an int -> an accelerator) and its step
  timer calls ``torch.accelerator.synchronize()``; both raise on a CPU-only torch.  On CPU the
  model is placed on ``cpu`` first and ``synchronize`` is a no-op for the duration of the call
  (restored afterwards).  Nothing changes on CUDA.
* the batches, the step loop and the checkpoints are ours (training/speculators/trainer.py): global steps of
  ``--global-batch`` packed sequences, gradient accumulation, one checkpoint per epoch gathered to rank 0;
  under torchrun speculators runs with ``--fsdp-shard`` in our process group (training/speculators/patches.py).
  ``--steps`` runs as many epochs as it needs, the last one cut short.
* progress is printed from speculators' own metric records (``speculators.metrics`` logger):
  step, loss (summed over the TTT steps), accuracy per TTT step (``full_acc_k``), tokens/s;
  the final ``DONE`` line reports ``train_acc`` = mean ``full_acc_0`` over the last 10% of steps
  (plus the validation accuracy of the last epoch).  ``OUT/_speculators_run/summary.json``
  keeps the numbers.
* after every epoch the draft is written to OUT (training/checkpoint.py) by the model's own
  ``save_pretrained`` with a bf16 state dict, as speculators' ``SingleGPUCheckpointer`` writes its epoch
  checkpoints (``architectures`` is ``["Eagle3DraftModel"]``, the 0.9 class name; the format marker is
  ``speculators_model_type: eagle3``), with ``OUT/checkpoint/<epoch>/`` to resume from.
  ``Eagle3DraftModel.from_pretrained(OUT)`` reloads it.
* The draft decoder config is written here (``--draft-config``; its choices: training/speculators/draft_config.py)
  instead of being synthesized by speculators from the verifier.

``--draft-arch mla`` trains SGLang's MLA EAGLE-3 layout for DeepSeek/Kimi targets
(``Eagle3DeepseekV2ForCausalLM``) with our own loop instead (training/mla/train.py: a PyTorch twin of
SGLang's class, same loss kind, checkpoint in the layout SGLang's load_weights reads). A Kimi-K2.5 wrapper
target (``model_type: kimi_k25``) works for both: its ``text_config`` is the target config, and speculators
gets a verifier view of it (training/target_view.py).

What is refused before training, by name: an ``--out`` that is a symlink, is or holds or lies inside
``--target``/``--data``, or holds anything but an earlier output of train (that one only with ``--force``;
outdir.py: the output is built beside OUT and renamed into place); a sample file that is not finite,
integer token ids in the target's vocab and states ``[L, K+1, H]`` (training/samples.py, every file is read
once first); a target whose embed / lm_head / norm are not finite; with ``--resume``, a checkpoint in ``--out``
that does not fit the run (training/resume.py: other shapes, corrupt or foreign files, checked before anything
is loaded). An epoch whose draft weights end non-finite is not saved (OUT keeps the last finite one).

CPU runs (tests): fp32 hidden states (autocast is CUDA-only), SDPA attention (flex attention
and the Triton fused loss are GPU paths), eager loss.  GPU defaults: bf16, speculators'
``simple_flex_attention``, fused (Triton) loss, ``torch.compile`` of the forward (speculators
does that itself whenever CUDA is available).
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import sharding
from ..checkpoint import check_identity, read_resume_point
from ..data import find_hs_dir, list_hs_files, parse_layer_ids, read_layer_ids_from_metadata
from ..distributed import current, on_main
from ..init_from import (
    continuing_line,
    llama_layer_config,
    mapping_note,
    read_draft,
    resumed_line,
    speculators_state_dict,
)
from ..options import TrainOptions
from ..report import TrainDraftError, say
from ..target_view import is_wrapper, read_tensors, text_config, verifier_view
from .draft_config import check_ratio, check_settings, layer_config_of, meta_model
from .progress import TrainingProgress
from .run import (
    build_argv,
    check_checkpoint_files,
    finish,
    history_rows,
    link_resumed,
    prepare,
    run_context,
    run_identity,
    run_speculators,
    speculators_modules,
    summarize,
    work_dir,
)

INIT_WEIGHTS = "init_from.safetensors"  # --init-from's weights in the working folder, as speculators names them


def _prepare_on_main(a: TrainOptions, world) -> dict:
    """Rank 0: everything read once (target, data, layer ids, the resume point), written into the working folder
    every rank reads from (a shared file system under multi-node torchrun)."""

    data, target, out = Path(a.data), Path(a.target), Path(a.out)
    target_cfg = text_config(target)  # a Kimi-K2.5 wrapper: its language model's config
    vocab = int(target_cfg["vocab_size"])
    hs_dir = find_hs_dir(data)
    hs_files = list_hs_files(hs_dir)
    layer_ids, src = _resolve_layer_ids(a, data, target, int(target_cfg["num_hidden_layers"]), is_wrapper(target))
    check_settings(a, target_cfg, layer_ids, src)
    dvs = a.draft_vocab_size
    try:
        read_tensors(target)  # the teacher's embed / lm_head / norm: present and finite
    except ValueError as e:
        raise TrainDraftError(str(e)) from e
    G, _ = sharding.accumulation(a.global_batch, world.size)
    dcfg = layer_config_of(target_cfg, a)
    identity = run_identity("llama", a, G, len(hs_files), layer_ids, dcfg, dvs or vocab) | {"ttt_steps": a.ttt_steps}
    state = read_resume_point(out, a.resume)
    check_identity(state, identity, out)
    result: dict = {
        "device": world.device,
        "layer_ids": layer_ids,
        "draft_vocab_size": dvs or vocab,
        "world_size": world.size,
    }
    work = work_dir(out)
    try:
        init = _init_from(a, target_cfg, work, state, result)  # a DIR that cannot be continued: before the data
        if init is not None:
            dcfg = llama_layer_config(init, dcfg)
        if state is not None:  # before anything is loaded or prepared
            check_checkpoint(out, state, a, target_cfg, dcfg, layer_ids, dvs or vocab)
        prepare(data, hs_files, work / "data", layer_ids, src, target_cfg, result)
        if init is not None:
            _mapping_note(init, work, vocab)
        (work / "draft_config.json").write_text(json.dumps(dcfg, indent=2))
        verifier = verifier_view(target, work / "verifier")  # speculators reads a top-level text config
        link_resumed(out, work, state)
    except BaseException:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        raise
    return {
        "work": work,
        "hs_dir": hs_dir,
        "layer_ids": layer_ids,
        "verifier": verifier,
        "identity": identity,
        "dvs": None if dvs == vocab else dvs,
        "result": result,
        "state": state,
        "init_weights": work / INIT_WEIGHTS if (work / INIT_WEIGHTS).exists() else None,
        "mapping": (work / "d2t.npy", work / "t2d.npy") if (work / "d2t.npy").exists() else None,
    }


def _init_from(a: TrainOptions, target_cfg: dict, work: Path, state: dict | None, result: dict):
    """--init-from DIR (training/init_from.py), read on rank 0 into the working folder: its weights under
    speculators' names (not when --resume continues from the run's own checkpoint) and its draft-vocab mapping
    (always: the teacher's lm_head rows follow it). Returns DIR as read, or None without --init-from."""
    if a.init_from is None:
        return None
    import numpy as np
    from safetensors.torch import save_file

    init = read_draft(a.init_from, target_cfg)
    sd = speculators_state_dict(init)
    result["init_from"] = str(a.init_from)
    if "d2t" in sd:
        np.save(work / "d2t.npy", sd["d2t"].numpy())
        np.save(work / "t2d.npy", sd["t2d"].numpy())
    if state is not None:
        say(resumed_line(init, a.out))
        return init
    save_file({k: v.contiguous() for k, v in sd.items()}, str(work / INIT_WEIGHTS))
    say(continuing_line(init, len(sd)))
    return init


def _mapping_note(init, work: Path, vocab: int) -> None:
    """The data's own draft vocabulary compared with DIR's (said once when they differ)."""
    import numpy as np
    import torch

    if (work / "d2t.npy").exists():
        d2t = torch.from_numpy(np.load(work / "d2t.npy"))
        note = mapping_note(init, d2t, work / "data" / "token_freq.pt", vocab)
        if note:
            say(note)


def check_checkpoint(out: Path, state: dict, a: TrainOptions, tcfg: dict, dcfg: dict, layer_ids, dvs: int) -> None:
    """--resume: the files of the checkpoint's last epoch against the draft this run builds (training/resume.py)."""
    check_checkpoint_files(out, state, lambda: meta_model(dcfg, tcfg, layer_ids, dvs, a.ttt_steps, a.target))


def train(a: TrainOptions, rule: dict) -> dict:
    """The Llama route of training.train_draft on this rank; `rule`: how --out is written
    (TrainOptions.output_rule, already checked)."""
    import shutil

    check_ratio(a)  # on every rank, before speculators is imported
    spec_cli, TrainConfig = speculators_modules()
    world, out = current(), Path(a.out)
    if world.device == "cpu":
        import torch

        if torch.cuda.is_available():
            say("note: --device cpu on a CUDA host: speculators still compiles its forward for CUDA hosts")
    got = on_main(lambda: _prepare_on_main(a, world), world)
    work = got["work"]
    try:
        progress = TrainingProgress(a.log_every, a.ttt_steps, None)
        record = {"arch": "llama", "target": str(a.target), "data": str(a.data)}
        ctx, keep = run_context(a, world, got, rule, record, progress, init_weights=got["init_weights"])
        argv = build_argv(
            a,
            verifier=got["verifier"],
            prep=work / "data",
            hs_dir=got["hs_dir"],
            work=work,
            layer_ids=got["layer_ids"],
            draft_cfg_path=work / "draft_config.json",
            draft_vocab_size=got["dvs"],
            device=world.device,
            world=world,
            mapping=got["mapping"],
        )
        run_speculators(spec_cli, TrainConfig, ctx, argv)
    finally:
        if world.main:
            shutil.rmtree(work, ignore_errors=True)
    result = summarize(a, ctx.result, progress)
    result.update(saved=str(out), history=history_rows(progress))
    result["selection"] = keep.summary()
    accs = " ".join(f"{x:.3f}" for x in result["train_acc_by_step"])
    more = f"loader={result['loader_share']:.1%} time={result.get('train_seconds', 0):.1f}s "
    return finish(a, result, world, out, f"ttt accs {accs}", more)


def _resolve_layer_ids(
    a: TrainOptions, data: Path, target: Path, n_target_layers: int, wrapper: bool
) -> tuple[list[int], str]:
    layer_ids, src = parse_layer_ids(a.layer_ids), "--layer-ids"
    if layer_ids is None:
        layer_ids, src = read_layer_ids_from_metadata(data)
    if layer_ids is None and wrapper:
        n = n_target_layers
        layer_ids, src = [2, n // 2, n - 3], "speculators' default [2, n//2, n-3]"
    if layer_ids is None:
        from speculators.models.utils import resolve_target_layer_ids

        layer_ids, src = resolve_target_layer_ids(None, str(target)), "speculators default [2, n//2, n-3]"
    return layer_ids, src
