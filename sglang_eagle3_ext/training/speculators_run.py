"""train_draft's Llama path around speculators' own trainer: its command line (built from ours), the run,
and the summary of its metric records (see train_draft.py's docstring for what and why)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from . import speculators_patches
from .data import TrainDraftError
from .progress import _Progress


def build_argv(a, *, prep: Path, hs_dir: Path, run: Path, layer_ids: list[int], draft_cfg_path: Path,
               draft_vocab_size: int | None, device: str, max_steps: int | None) -> list[str]:
    cpu = device == "cpu"
    argv = [
        "--speculator-type", "eagle3",
        "--verifier-name-or-path", str(a.target),
        "--data-path", str(prep),
        "--hidden-states-path", str(hs_dir),
        "--hidden-states-backend", "file",
        "--on-missing", "raise",
        "--save-path", str(run / "checkpoints"),
        "--log-dir", str(run / "logs"),
        "--draft-config", str(draft_cfg_path),
        "--target-layer-ids", *[str(x) for x in layer_ids],
        "--mask-token-id", "0",
        "--no-norm-before-residual", "--no-norm-before-fc", "--no-norm-output",
        "--ttt-steps", str(a.ttt_steps),
        "--total-seq-len", str(a.total_seq_len),
        "--train-data-ratio", str(a.train_ratio),
        "--epochs", str(a.epochs or 1),
        "--lr", str(a.lr),
        "--optimizer", a.optimizer,
        "--scheduler-type", a.scheduler,
        "--num-workers", str(a.num_workers),
        "--seed", str(a.seed),
        "--log-freq", "1",
        "--no-resume-from-checkpoint",
        "--hidden-states-dtype", "float32" if cpu else "bfloat16",
        "--draft-attn-impl", "sdpa" if cpu else a.attn_impl,
        "--loss-implementation", "eager" if cpu else a.loss_impl,
    ]
    if a.loss_fn:
        argv += ["--loss-fn", a.loss_fn]
    if draft_vocab_size is not None:
        argv += ["--draft-vocab-size", str(draft_vocab_size), "--token-freq-path", str(prep / "token_freq.pt")]
    if max_steps is not None:
        argv += ["--max-steps", str(max_steps)]
    if a.warmup_steps is not None:
        argv += ["--scheduler-warmup-steps", str(a.warmup_steps)]
    return argv


def _run_speculators(a, spec_cli, TrainConfig, *, prep, hs_dir, run, out, layer_ids, cfg_path, dvs, device, result):
    steps = a.steps
    argv = build_argv(a, prep=prep, hs_dir=hs_dir, run=run, layer_ids=layer_ids, draft_cfg_path=cfg_path,
                      draft_vocab_size=dvs, device=device, max_steps=steps)
    if a.epochs is None and steps is None:
        from ..cli.train import DEFAULT_EPOCHS

        argv[argv.index("--epochs") + 1] = str(DEFAULT_EPOCHS)
    cfg = TrainConfig.resolve(argv)
    progress = _Progress(a.log_every, a.ttt_steps, None)
    with speculators_patches.applied(spec_cli, device=device, out=out, steps=steps,
                                     epochs_given=a.epochs is not None, keep_checkpoints=a.keep_checkpoints,
                                     progress=progress, result=result):
        spec_cli.main(cfg)
    if "saved" not in result:
        raise TrainDraftError("speculators' trainer returned without training (see its log above)")
    if not a.keep_checkpoints:
        shutil.rmtree(run / "checkpoints", ignore_errors=True)
    return progress


def _summarize(a, result: dict, progress: _Progress, run: Path) -> None:
    hist = progress.history
    tail = hist[-max(1, len(hist) // 10):]

    def mean(key, rows):
        vals = [r[key] for r in rows if key in r and r[key] == r[key]]
        return sum(vals) / len(vals) if vals else float("nan")
    result.update(
        steps=len(hist), first_loss=hist[0].get("loss") if hist else None, tail_steps=len(tail),
        final_loss=mean("loss", tail), train_acc=mean("full_acc_0", tail),
        train_acc_by_step=[mean(f"full_acc_{k}", tail) for k in range(a.ttt_steps)],
        val=progress.val[-1] if progress.val else None,
        tokens_per_s=(sum(r["tokens"] for r in hist) / result.get("train_seconds", 1.0)) if hist else 0.0,
        history=[{k: r.get(k) for k in ("step", "loss", "full_acc_0", "tokens_per_s")} for r in hist],
    )
    (run / "summary.json").write_text(json.dumps({k: v for k, v in result.items() if k != "history"}, indent=2,
                                                 default=str))
