"""The Llama route around speculators' own trainer: its command line (built from ours), the run on every rank,
the output written after each epoch, and the summary of its metric records (see training/speculators/train.py
for what and why). The DFlash route (training/dflash/) is run by the same pieces: the run's context, the identity
a resume is held to, the checkpoint's files checked before it, the DONE line."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

from ...outdir import link_tree
from .. import sharding
from ..checkpoint import CKPT_DIR, STATE, Publisher, maybe_stop, write_state
from ..data import prepare_data
from ..distributed import World, on_main
from ..options import DEFAULT_EPOCHS, RUN_DIR
from ..report import TrainDraftError, non_finite, require_learned, say
from ..resume import check_history, check_model_file, check_optimizer, check_scheduler, check_training_state
from ..selection import Keeper
from . import patches
from .progress import TrainingProgress


def speculators_modules():
    """speculators' train command module and its TrainConfig (TrainDraftError naming the package when missing)."""
    try:
        import speculators  # noqa: F401
        from speculators.train import cli as spec_cli
        from speculators.train.config import TrainConfig
    except ImportError as e:  # pragma: no cover - environment problem
        raise TrainDraftError(f"the speculators library is needed (pip install speculators): {e}") from e
    return spec_cli, TrainConfig


def work_dir(out: Path) -> Path:
    """The run's working folder beside --out (speculators' prepared data and checkpoints; removed at the end)."""
    import os
    import secrets

    real = Path(os.path.abspath(out))
    real.parent.mkdir(parents=True, exist_ok=True)
    d = real.parent.resolve() / f".{real.name}.train-work-{os.getpid()}-{secrets.token_hex(4)}"
    d.mkdir()
    return d


def prepare(
    data: Path, hs_files: list[Path], prep: Path, layer_ids: list[int], src: str, target_cfg: dict, result: dict
) -> None:
    """Check every file and write speculators' Arrow dataset into `prep`; the counts go into `result`."""
    t0 = time.perf_counter()
    info = prepare_data(
        data,
        hs_files,
        prep,
        len(layer_ids) + 1,
        int(target_cfg["vocab_size"]),
        int(target_cfg["hidden_size"]),
        f"{len(layer_ids)} aux layers {layer_ids} ({src}) + the final state",
    )
    result.update(info)
    if info["n_samples"] < 2:
        raise TrainDraftError("need at least 2 samples (speculators holds out a validation split)")
    say(
        f"data: {info['n_samples']} samples, {info['n_tokens']} tokens ({info['n_loss_tokens']} in the loss), "
        f"{info['n_slots'] - 1} aux layers {layer_ids} ({src}) + final; "
        f"checked and prepared in {time.perf_counter() - t0:.1f}s"
    )


def build_argv(
    a,
    *,
    verifier: Path,
    prep: Path,
    hs_dir: Path,
    work: Path,
    layer_ids: list[int],
    draft_cfg_path: Path,
    draft_vocab_size: int | None,
    device: str,
    world: World,
    mapping: tuple[Path, Path] | None = None,
) -> list[str]:
    """speculators' `train` flags for options `a` (a TrainOptions); `verifier`: the target as speculators
    reads it (training/target_view.verifier_view); `work`: the run's working folder (its checkpoints);
    `mapping`: d2t/t2d .npy files to take instead of the data's own draft vocabulary (--init-from)."""
    argv = [
        *_io_flags(verifier, prep, hs_dir, work, layer_ids, draft_cfg_path),
        *recipe_flags(a, cpu=device == "cpu", distributed=world.distributed),
        "--ttt-steps",
        str(a.ttt_steps),
    ]
    if draft_vocab_size is not None:
        argv += ["--draft-vocab-size", str(draft_vocab_size), "--token-freq-path", str(prep / "token_freq.pt")]
    if mapping is not None:
        argv += ["--d2t-path", str(mapping[0]), "--t2d-path", str(mapping[1])]
    return argv


def _io_flags(
    verifier: Path, prep: Path, hs_dir: Path, work: Path, layer_ids: list[int], draft_cfg_path: Path
) -> list[str]:
    """What speculators reads and writes, and the draft head's fixed options (see train.py: no tokenizer needed,
    the norms SGLang does not serve off)."""
    return [
        "--speculator-type",
        "eagle3",
        *data_flags(verifier, prep, hs_dir, work, layer_ids, draft_cfg_path),
        "--mask-token-id",
        "0",
        "--no-norm-before-residual",
        "--no-norm-before-fc",
        "--no-norm-output",
    ]


def data_flags(
    verifier: Path, prep: Path, hs_dir: Path, work: Path, layer_ids: list[int], draft_cfg_path: Path
) -> list[str]:
    """What speculators reads and writes: the verifier, the prepared data and the files in place (never generated
    on demand), the working folder, the draft's layer config, the aux layers."""
    return [
        "--verifier-name-or-path",
        str(verifier),
        "--data-path",
        str(prep),
        "--hidden-states-path",
        str(hs_dir),
        "--hidden-states-backend",
        "file",
        "--on-missing",
        "raise",
        "--save-path",
        str(work / CKPT_DIR),
        "--log-dir",
        str(work / "logs"),
        "--draft-config",
        str(draft_cfg_path),
        "--target-layer-ids",
        *[str(x) for x in layer_ids],
    ]


def recipe_flags(a, *, cpu: bool, distributed: bool) -> list[str]:
    """The training recipe of options `a` shared by speculators' drafts; on CPU the paths that run there (fp32
    states, SDPA, eager loss); FSDP over several ranks."""
    out = [
        "--total-seq-len",
        str(a.total_seq_len),
        "--train-data-ratio",
        str(a.train_ratio),
        "--epochs",
        str(a.epochs or (1 if a.steps else DEFAULT_EPOCHS)),
        "--lr",
        str(a.lr),
        "--optimizer",
        a.optimizer,
        "--scheduler-type",
        a.scheduler,
        "--num-workers",
        str(a.num_workers),
        "--seed",
        str(a.seed),
        "--log-freq",
        "1",
        "--hidden-states-dtype",
        "float32" if cpu else "bfloat16",
        "--draft-attn-impl",
        "sdpa" if cpu else a.attn_impl,
        "--loss-implementation",
        "eager" if cpu else a.loss_impl,
    ]
    out += ["--fsdp-shard"] if distributed else []
    out += ["--loss-fn", a.loss_fn] if a.loss_fn else []
    out += ["--scheduler-warmup-steps", str(a.warmup_steps)] if a.warmup_steps is not None else []
    return out


@dataclasses.dataclass
class RunContext:
    """One Llama run as the trainer subclass (training/speculators/trainer.py) sees it."""

    opts: object  # TrainOptions
    world: World
    device: str
    G: int
    A: int
    work: Path
    publisher: object  # checkpoint.Publisher
    identity: dict
    progress: TrainingProgress
    result: dict
    epochs_published: int = 0
    init_weights: Path | None = None  # --init-from's weights (speculators' names), loaded after setup_model
    config_extra: dict = dataclasses.field(default_factory=dict)  # fields a route's saved configs add (setup_model)

    seed = property(lambda self: self.opts.seed)
    total_seq_len = property(lambda self: self.opts.total_seq_len)
    steps = property(lambda self: self.opts.steps)
    epochs_given = property(lambda self: self.opts.epochs is not None)

    def prune(self, ckpt: Path, epoch: int) -> None:
        """Only the newest epoch's checkpoint is kept in the working folder (all of them with --keep-checkpoints)."""
        if self.world.main and not self.opts.keep_checkpoints:
            for d in ckpt.iterdir():
                if d.is_dir() and not d.is_symlink() and d.name.isdigit() and int(d.name) != epoch:
                    shutil.rmtree(d, ignore_errors=True)

    def publish(self, trainer, epoch: int) -> None:
        """--out after this epoch: the draft (bf16, as speculators' own checkpointer writes it), the checkpoint,
        speculators' prepared data, the summary so far."""
        ckpt = Path(trainer.checkpointer.path)
        sd = trainer.checkpointer.last_state_dict
        raw = getattr(trainer.model, "module", trainer.model)

        def build(tmp: Path) -> None:
            import torch
            from speculators.train.checkpointer import convert_float_dtype, patch_config_dtype

            bf16 = convert_float_dtype(sd, torch.bfloat16)
            bad = non_finite(bf16)
            if bad:
                raise TrainDraftError(
                    f"the trained draft's weights are not finite ({', '.join(bad[:3])}"
                    f"{', ...' if len(bad) > 3 else ''}): training diverged; not saved "
                    f"(--out keeps the last finite epoch, if any); "
                    f"lower --lr"
                )
            raw.save_pretrained(tmp, state_dict=bf16)
            patch_config_dtype(tmp / "config.json", torch.bfloat16)
            run = tmp / RUN_DIR
            link_tree(self.work / "data", run / "data")
            shutil.copy2(self.work / "draft_config.json", run / "draft_config.json")
            summary = summarize(self.opts, dict(self.result), self.progress)
            (run / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            epochs = sorted(
                int(d.name) for d in ckpt.iterdir() if d.is_dir() and not d.is_symlink() and d.name.isdigit()
            )
            files = []
            for e in epochs:
                link_tree(ckpt / str(e), tmp / CKPT_DIR / str(e))
                files += [f"{e}/{p.name}" for p in sorted((ckpt / str(e)).iterdir()) if p.is_file()]
            write_state(
                tmp / CKPT_DIR,
                {
                    "epochs_done": epoch + 1,
                    "global_step": trainer.global_step,
                    "identity": self.identity,
                    "files": files,
                    "history": self.progress.history,
                    "val": self.progress.val,
                },
            )

        self.publisher.publish(build)
        self.epochs_published = epoch + 1
        on_main(lambda: maybe_stop(epoch + 1, trainer.config.num_epochs), self.world)


def run_context(a, world: World, got: dict, rule: dict, record: dict, progress: TrainingProgress, **fields):
    """(this rank's RunContext, the Keeper of --select-by): a resumed run's progress restored, --out written by
    epoch under `rule` with `record`; `got`: what rank 0 prepared (work, state, identity, result); `fields`: the
    context's other fields (opts: `a` unless given)."""
    G, A = sharding.accumulation(a.global_batch, world.size)
    state = got["state"]
    if state is not None:
        progress.history = list(state.get("history") or [])
        progress.val = list(state.get("val") or [])
    keep = Keeper.for_run(a, state)  # which epoch's draft --out holds (--select-by)
    ctx = RunContext(
        **{"opts": a, **fields},
        world=world,
        device=world.device,
        G=G,
        A=A,
        work=got["work"],
        publisher=Publisher(Path(a.out), rule, record, world, keep),
        identity=got["identity"],
        progress=progress,
        result=got["result"],
    )
    return ctx, keep


def run_identity(arch: str, a, G: int, n_files: int, layer_ids: list[int], dcfg: dict, vocab: int) -> dict:
    """What a resumed run must share with the checkpoint's (training/checkpoint.IDENTITY), as every route through
    speculators' trainer records it; a route adds its own settings."""
    return {
        "arch": arch,
        "seed": a.seed,
        "global_batch": G,
        "n_train": int(n_files * a.train_ratio),
        "total_seq_len": a.total_seq_len,
        "layer_ids": layer_ids,
        "optimizer": a.optimizer,
        "train_ratio": a.train_ratio,
        "num_layers": dcfg["num_hidden_layers"],
        "intermediate_size": dcfg["intermediate_size"],
        "head_dim": dcfg["head_dim"],
        "draft_vocab_size": vocab,
    }


def check_checkpoint_files(out: Path, state: dict, build_model) -> None:
    """--resume: the files of the checkpoint's last epoch against the draft this run builds (`build_model()`: on
    the meta device), as speculators' checkpointer writes them (training/resume.py)."""
    gs, d = state["global_step"], out / CKPT_DIR / str(state["epochs_done"] - 1)
    check_history(state, str(out / CKPT_DIR / STATE), ("step",))
    model = build_model()
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    params = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]
    check_model_file(
        d / "model.safetensors", {k: tuple(v.shape) for k, v in model.state_dict().items() if k not in frozen}
    )
    check_optimizer(d / "optimizer_state_dict.pt", params, gs, by_name=True)
    if (d / "scheduler_state_dict.pt").exists():
        check_scheduler(d / "scheduler_state_dict.pt", gs)
    check_training_state(d / "training_state.json", state["epochs_done"], gs)


def link_resumed(out: Path, work: Path, state: dict | None) -> None:
    """--resume: the checkpoint's last epoch linked into the working folder, where speculators' trainer goes on."""
    if state is not None:
        e = state["epochs_done"] - 1
        link_tree(out / CKPT_DIR / str(e), work / CKPT_DIR / str(e))
        say(f"--resume: continuing after epoch {e + 1} (optimizer step {state['global_step']}) from {out}")


def run_speculators(spec_cli, TrainConfig, ctx: RunContext, argv: list[str]) -> None:
    """speculators' `train` main on this rank, with our trainer swapped in (training/speculators/patches.py)."""
    cfg = TrainConfig.resolve(argv)
    with patches.applied(spec_cli, ctx):
        spec_cli.main(cfg)
    if "train_seconds" not in ctx.result:
        raise TrainDraftError("speculators' trainer returned without training (see its log above)")


def summarize(a, result: dict, progress: TrainingProgress) -> dict:
    """The run's figures from speculators' metric records: losses and accuracies (means of the last 10 % of the
    steps), the last validation, and this process's throughput (the first step's start-up left out)."""
    hist = progress.history
    tail = hist[-max(1, len(hist) // 10) :]
    timed = hist[1:] or hist
    secs = sum(r.get("time_s", 0.0) for r in timed) or float("nan")

    def mean(key, rows):
        vals = [r[key] for r in rows if key in r and r[key] == r[key]]
        return sum(vals) / len(vals) if vals else float("nan")

    return {
        **{k: v for k, v in result.items() if k != "history"},
        "steps": len(hist),
        "first_loss": hist[0].get("loss") if hist else None,
        "tail_steps": len(tail),
        "final_loss": mean("loss", tail),
        "train_acc": mean("full_acc_0", tail),
        "train_acc_by_step": [mean(f"full_acc_{k}", tail) for k in range(a.ttt_steps)],
        "val": progress.val[-1] if progress.val else None,
        "tokens_per_s": sum(r.get("tokens", 0) for r in timed) / secs if hist else 0.0,
        "loader_share": sum(r.get("fetch_s", 0.0) for r in timed) / secs if hist else 0.0,
    }


def finish(a, summary: dict, world: World, out: Path, accs: str, more: str = "") -> dict:
    """The run's DONE line (`accs`: its accuracies by step, with what they are; `more`: figures said before out=),
    then --min-val-acc held on rank 0. Returns `summary`."""
    va = summary["val"] or {}
    first = summary["first_loss"]
    say(
        f"DONE steps={summary['steps']} train_acc={summary['train_acc']:.4f} ({accs}, mean of last "
        f"{summary['tail_steps']} steps) loss {float('nan') if first is None else first:.4f}->"
        f"{summary['final_loss']:.4f} val_acc={va.get('full_acc_0_epoch', float('nan')):.4f} "
        f"tok/s/process={summary['tokens_per_s']:.0f} {more}out={out}"
    )
    on_main(lambda: require_learned(va.get("full_acc_0_epoch"), a.min_val_acc, out), world)
    return summary


def history_rows(progress: TrainingProgress) -> list[dict]:
    keys = ("step", "epoch", "loss", "full_acc_0", "tokens", "tokens_per_s", "time_s", "fetch_s")
    return [{k: r.get(k) for k in keys} for r in progress.history]
