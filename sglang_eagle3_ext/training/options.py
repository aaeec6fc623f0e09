"""What one draft-training run is asked to do (`TrainOptions`), and how it writes its output folder.

The `train` command line builds these from its flags; a Python caller (or a launcher of its own) builds them
directly. Field names are the flags' (`--ttt-steps` -> `ttt_steps`), and so are the messages of `check()`."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable

from ..boundary import Refused
from ..dump.config import META_FILE
from .data import find_hs_dir
from .report import TrainDraftError
from .selection import check_options
from .train_flags import (  # noqa: F401 - DEFAULT_EPOCHS re-exported: the routes read it here
    ATTN_IMPLS,
    DEFAULT_EPOCHS,
    DEVICES,
    EXPORT,
    LOSS_IMPLS,
    OPTIMIZERS,
    SCHEDULERS,
    ScoreOptions,
    TrainFlags,
)

RUN_DIR = "_speculators_run"
# (fields, minimum, None allowed): the integer settings
_INTEGERS = (
    (("ttt_steps", "total_seq_len", "log_every"), 1, False),
    (
        (
            "num_layers",
            "epochs",
            "steps",
            "draft_vocab_size",
            "intermediate_size",
            "head_dim",
            "max_position_embeddings",
            "global_batch",
            "world_size",
        ),
        1,
        True,
    ),
    (("block_size", "max_anchors"), 1, True),
    (("num_workers", "seed"), 0, False),
    (("mask_token_id",), 0, True),
    (("warmup_steps",), 0, True),
)
_CHOICES = (
    ("optimizer", OPTIMIZERS),
    ("scheduler", SCHEDULERS),
    ("loss_impl", LOSS_IMPLS),
    ("attn_impl", ATTN_IMPLS),
    ("device", DEVICES),
)
# what draft_arch / num_layers left unset mean without --init-from
FRESH_DEFAULTS = {"draft_arch": "llama", "num_layers": 1}
# what a train --out held before outputs carried outdir.MARKER: replaceable with --force
_LEGACY_OUTPUT = {"config.json", "model.safetensors", RUN_DIR, "train_summary.json", "generation_config.json"}


@dataclasses.dataclass
class TrainOptions(TrainFlags):
    """One training run: the inputs, the output folder, the draft layout and the trainer's settings (each a
    flag of `train`, declared once in train_flags.py), and the commands' epoch scorer."""

    epoch_scorer: Callable[[Path], tuple] | None = dataclasses.field(  # draft folder -> (score, details);
        default=None, compare=False, repr=False
    )  # the commands': acceptance/select.scored

    def check(self) -> None:
        """TrainDraftError naming the first setting out of its range (the command line's types already
        refuse these; a Python caller gets the same rules)."""
        for names, minimum, optional in _INTEGERS:
            for name in names:
                _need_int(self, name, minimum, optional)
        for name, choices in _CHOICES:
            v = getattr(self, name)
            if v not in choices and not (name == "device" and v is None):
                raise TrainDraftError(f"{_flag(name)} {v!r}: expected one of {', '.join(choices)}")
        if not _finite(self.lr) or self.lr <= 0:
            raise TrainDraftError(f"--lr {self.lr!r}: expected a finite number > 0")
        if not _finite(self.train_ratio) or not 0 < self.train_ratio <= 1:
            raise TrainDraftError(f"--train-ratio {self.train_ratio!r}: expected a finite number in (0, 1]")
        if not isinstance(self.min_val_acc, (int, float)) or isinstance(self.min_val_acc, bool):
            raise TrainDraftError(f"--min-val-acc {self.min_val_acc!r}: expected a number")
        gib = self.device_memory_gib
        if gib is not None and (not _finite(gib) or gib <= 0):
            raise TrainDraftError(f"--device-memory-gib {gib!r}: expected a finite number > 0")
        if self.init_from is not None and not isinstance(self.init_from, (str, Path)):
            raise TrainDraftError(f"--init-from {self.init_from!r}: expected a draft's folder")
        for name in ("force", "resume", "dry_run", "keep_checkpoints"):
            if not isinstance(getattr(self, name), bool):
                raise TrainDraftError(f"{_flag(name)} {getattr(self, name)!r}: expected True or False")

        check_options(self)

    def with_defaults(self) -> "TrainOptions":
        """The settings left unset (None, so that --init-from can tell a flag left out from one given) filled
        with what a fresh run trains."""
        return dataclasses.replace(self, **{k: v for k, v in FRESH_DEFAULTS.items() if getattr(self, k) is None})

    def output_rule(self) -> dict:
        """How train writes --out (outdir.py): never into or around its inputs; an earlier output only
        with --force."""
        return dict(
            tool="train",
            flag="--out",
            replace=bool(self.force or self.resume),
            legacy=_legacy_output,
            inputs=[("target (--target)", self.target), ("data (--data)", self.data)]
            + ([("draft (--init-from)", self.init_from)] if self.init_from is not None else []),
        )


# the options types that declare train's flags, in the order of `train --help`
FLAG_TYPES = (TrainOptions, ScoreOptions)

BLOCK_SETTINGS = ("block_size", "mask_token_id", "max_anchors")  # a block draft's (DFlash) own settings


def refuse_block_settings(a, arch: str) -> None:
    """A route that drafts one token a step refuses a block draft's settings, named by their flags."""
    given = [f for f in BLOCK_SETTINGS if getattr(a, f) is not None]
    if given:
        raise TrainDraftError(
            f"{_flag(given[0])} is a block draft's setting (--draft-arch dflash); --draft-arch {arch} drafts one "
            f"token a step: leave it out"
        )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need_int(opts: TrainOptions, name: str, minimum: int, optional: bool) -> None:
    v = getattr(opts, name)
    if v is None and optional:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise TrainDraftError(f"{_flag(name)} {v!r}: expected an integer >= {minimum}")


def _legacy_output(d: Path) -> bool:
    names = {p.name for p in d.iterdir()}
    return (
        {"config.json", "model.safetensors"} <= names
        and bool(names & {RUN_DIR, "train_summary.json"})
        and names <= _LEGACY_OUTPUT
    )


def check_data(data: str) -> None:
    """--data holds hidden-state files (named, not read): a dump not yet exported, or a folder of something
    else, is said now rather than once torch and the trainer are loaded."""
    try:
        find_hs_dir(Path(data))
    except TrainDraftError:
        if (Path(data) / META_FILE).is_file():
            raise Refused(
                f"--data {data}: a dump, not yet exported: run `sglang-eagle3 dump export --dump-dir {data} "
                f"--to speculators --out DIR`, then pass --data DIR"
            ) from None
        raise Refused(
            f"--data {data}: no hs_{{i}}.safetensors files here or in its hidden_states/; give the folder "
            f"`{EXPORT}` wrote"
        ) from None
