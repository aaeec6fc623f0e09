"""The DFlash route (`train --draft-arch dflash`): speculators' own DFlash draft (``DFlashDraftModel.from_training_args``:
Qwen3 decoder layers over ``fc`` of the K aux states and ``hidden_norm``, the verifier's embedding, head and final
norm loaded frozen) and its loss (``get_trainer_kwargs``: anchored blocks of --block-size tokens, the anchor the
target's own token, the rest --mask-token-id, scored against the target's next-token distribution per position),
run by speculators' ``train`` main with ``--speculator-type dflash``, from the files `dump export --to
speculators` writes (the aux states and the last hidden state, speculators' ``verifier_last_hidden_states``).

Everything around speculators' call is the Llama route's (training/speculators/: the prepared Arrow data and
the files checked once on rank 0, our batches, step loop, checkpoints, --out written after every epoch, the
process group under torchrun, --resume checked before anything loads); what differs is here and in config.py:
the aux layers (SGLang's DFlash rule when neither --layer-ids nor --data's metadata names them), the Qwen3 layer
config, the mask token (--mask-token-id, else the target tokenizer's, resolved here and recorded), the full
vocabulary, and the metric names: speculators' ``position_{i}_acc`` (the i-th drafted token of a block) are
reported as ``full_acc_{i-1}``, as the Llama route reports its i-th drafted token, so the progress lines, the
summary, --min-val-acc and build's report read both routes alike.

--out holds the draft in speculators' format (``DFlashSpeculator``, ``aux_hidden_state_layer_ids`` = HF
indices, and ``num_target_layers``: the target's layer count, an extra field speculators' config keeps);
`convert` writes SGLang's layout (``DFlashDraftModel``, ``dflash_config.target_layer_ids`` = those indices - 1,
``num_target_layers``, the mask token and block size).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from .. import sharding
from ..checkpoint import check_identity, read_resume_point
from ..data import find_hs_dir, list_hs_files
from ..distributed import current, on_main
from ..report import TrainDraftError, say
from ..speculators.progress import TrainingProgress
from ..speculators.run import (
    check_checkpoint_files,
    data_flags,
    finish,
    history_rows,
    link_resumed,
    prepare,
    recipe_flags,
    run_context,
    run_speculators,
    speculators_modules,
    summarize,
    work_dir,
)
from ..target_view import read_tensors, text_config, verifier_view
from . import config as C


class BlockProgress(TrainingProgress):
    """speculators' DFlash metric records under the Llama route's names: position i's accuracy as full_acc_{i-1}
    (the i-th drafted token), then printed and kept as the Llama route's are."""

    def emit(self, record):
        msg = record.msg
        if isinstance(msg, dict):
            for part, suffix in (("train", ""), ("val", "_epoch")):
                if isinstance(msg.get(part), dict):
                    msg = {**msg, part: renamed(msg[part], suffix)}
            record.msg = msg
        super().emit(record)


def renamed(metrics: dict, suffix: str) -> dict:
    out = {}
    for k, v in metrics.items():
        pos = k.removeprefix("position_").removesuffix(f"_acc{suffix}")
        out[f"full_acc_{int(pos) - 1}{suffix}" if k.startswith("position_") and pos.isdigit() else k] = v
    return out


def _mask_token_id(a, target: Path, vocab: int) -> int:
    """--mask-token-id, else the target tokenizer's mask token by speculators' rule (its own, an unused row of
    the embedding, else pad/eos/unk)."""
    if a.mask_token_id is not None:
        return a.mask_token_id
    C.needs_tokenizer(a, target)
    from speculators.train.utils import resolve_mask_token_id

    try:
        mid = int(resolve_mask_token_id(str(target), vocab))
    except (OSError, ValueError) as e:
        raise TrainDraftError(f"--mask-token-id: {target}'s tokenizer names none ({e}); give --mask-token-id N") from e
    if not 0 <= mid < vocab:
        raise TrainDraftError(
            f"--mask-token-id: {target}'s tokenizer gives {mid}, outside the target's vocabulary [0, {vocab - 1}]; "
            f"give --mask-token-id N"
        )
    say(f"mask token: id {mid} (the target's tokenizer; --mask-token-id to choose another)")
    return mid


def _prepare_on_main(a, world) -> dict:
    """Rank 0: the target, the data, the aux layers, the mask token and the resume point, read once into the
    working folder every rank reads from."""
    data, target, out = Path(a.data), Path(a.target), Path(a.out)
    tcfg = text_config(target)
    vocab = int(tcfg["vocab_size"])
    C.check_settings(a, tcfg)
    hs_files = list_hs_files(find_hs_dir(data))
    layer_ids, src = C.layer_ids_for(a, int(tcfg["num_hidden_layers"]), data)
    try:
        read_tensors(target)  # the teacher's embed / lm_head / norm: present and finite
    except ValueError as e:
        raise TrainDraftError(str(e)) from e
    mask = _mask_token_id(a, target, vocab)
    G, _ = sharding.accumulation(a.global_batch, world.size)
    dcfg = C.draft_layer_config(tcfg, a)
    ident = C.identity(a, G, len(hs_files), layer_ids, dcfg, vocab, mask)
    state = read_resume_point(out, a.resume)
    check_identity(state, ident, out)
    result = {"device": world.device, "layer_ids": layer_ids, "draft_vocab_size": vocab, "world_size": world.size}
    result.update(block_size=C.block_size(a), mask_token_id=mask)
    work = work_dir(out)
    try:
        if state is not None:  # before anything is loaded or prepared
            check_checkpoint(out, state, a, tcfg, dcfg, layer_ids, mask)
        prepare(data, hs_files, work / "data", layer_ids, src, tcfg, result)
        (work / "draft_config.json").write_text(json.dumps(dcfg, indent=2))
        verifier = verifier_view(target, work / "verifier")
        link_resumed(out, work, state)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return dict(
        work=work,
        hs_dir=find_hs_dir(data),
        layer_ids=layer_ids,
        verifier=verifier,
        identity=ident,
        mask=mask,
        result=result,
        state=state,
        num_target_layers=int(tcfg["num_hidden_layers"]),
    )


def check_checkpoint(out: Path, state: dict, a, tcfg: dict, dcfg: dict, layer_ids, mask: int) -> None:
    """--resume: the files of the checkpoint's last epoch against the draft this run builds (training/resume.py)."""
    check_checkpoint_files(out, state, lambda: C.meta_model(dcfg, tcfg, layer_ids, a, mask, a.target))


def build_argv(a, got: dict, device: str, world) -> list[str]:
    """speculators' `train` flags of a DFlash run."""
    w = got["work"]
    return [
        "--speculator-type",
        "dflash",
        *data_flags(got["verifier"], w / "data", got["hs_dir"], w, got["layer_ids"], w / "draft_config.json"),
        *recipe_flags(a, cpu=device == "cpu", distributed=world.distributed),
        "--mask-token-id",
        str(got["mask"]),
        "--block-size",
        str(C.block_size(a)),
        "--max-anchors",
        str(C.max_anchors(a)),
    ]


def train(a, rule: dict) -> dict:
    """The DFlash route of training.train_draft on this rank; `rule`: how --out is written (already checked)."""
    C.check_settings(a, text_config(Path(a.target)))  # on every rank, before speculators is imported
    spec_cli, TrainConfig = speculators_modules()
    world, out = current(), Path(a.out)
    got = on_main(lambda: _prepare_on_main(a, world), world)
    work = got["work"]
    positions = C.block_size(a) - 1
    shown = dataclasses.replace(a, ttt_steps=positions)  # the summary's accuracies: one per drafted position
    try:
        progress = BlockProgress(a.log_every, min(positions, 4), None)
        record = {"arch": a.draft_arch, "target": str(a.target), "data": str(a.data)}
        extra = {"num_target_layers": got["num_target_layers"]}  # SGLang bounds target_layer_ids by it (convert)
        ctx, keep = run_context(a, world, got, rule, record, progress, opts=shown, config_extra=extra)
        run_speculators(spec_cli, TrainConfig, ctx, build_argv(a, got, world.device, world))
    finally:
        if world.main:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(shown, ctx.result, progress)
    summary.update(saved=str(out), history=history_rows(progress), selection=keep.summary())
    accs = " ".join(f"{x:.3f}" for x in summary["train_acc_by_step"][:4])
    return finish(a, summary, world, out, f"first drafted token; positions {accs}")
