"""Which epoch's draft --out keeps (`TrainOptions.select_by`): the last one, or the one a per-epoch score ranks
best (`TrainOptions.epoch_scorer(draft_dir) -> (score, details)`, higher is better; the train command's is the
accept length `eval` predicts on the held-out split: acceptance/select.py, built outside training because
acceptance reads with training's readers).

On rank 0, inside each epoch's publish (checkpoint.Publisher): the route has built the whole new output in a
fresh folder; the epoch's draft (the top-level files) is linked into a scratch folder beside --out and scored;
when it does not beat the best so far, those files of the new output are replaced by the draft --out holds now,
which is the best so far (--out is only ever replaced whole, so its draft and its checkpoint state agree).
checkpoint/ is always the last epoch's (what --resume continues from); its state.json records the scores and
the kept epoch, so that a resumed run keeps comparing against the best so far. A score that is not a finite
number never beats one that is; a tie keeps the earlier epoch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from ..boundary import BadInput, field
from ..outdir import link_or_copy
from .data import find_hs_dir, list_hs_files
from .report import TrainDraftError, say

SELECT_BY = ("last", "predicted-accept")
RECORD = "selection"  # its key in checkpoint/state.json
# top-level files of an output that describe the run rather than make up the draft
RUN_FILES = frozenset({"train_summary.json", ".sglang-eagle3-output.json"})


def check_options(opts) -> None:
    """TrainDraftError naming --select-by when the selection settings cannot work."""
    if opts.select_by not in SELECT_BY:
        raise TrainDraftError(f"--select-by {opts.select_by!r}: expected one of {', '.join(SELECT_BY)}")
    scorer = opts.epoch_scorer
    if scorer is not None and not callable(scorer):
        raise TrainDraftError(
            f"--select-by {opts.select_by}: epoch_scorer {scorer!r} is not callable; expected "
            f"a function of the epoch's draft folder returning (score, details)"
        )
    if opts.select_by == "predicted-accept" and scorer is None:
        raise TrainDraftError(
            "--select-by predicted-accept: no epoch_scorer to rank the epochs with; the train and build "
            "commands make it (a Python caller: sglang_eagle3_ext.acceptance.select.scored(options))"
        )
    if opts.select_by == "predicted-accept" and not opts.dry_run:
        _need_heldout(opts)


def _need_heldout(opts) -> None:
    """Scoring needs samples the run does not train on: both routes hold out the files past
    int(n * --train-ratio), none of a single sample (the MLA route trains on it, the Llama route refuses it)."""

    ratio = opts.train_ratio
    if isinstance(ratio, (int, float)) and ratio >= 1:
        raise TrainDraftError(
            f"--select-by predicted-accept with --train-ratio {ratio:g}: nothing is held out to "
            f"score the epochs on; give --train-ratio below 1 (e.g. 0.95), or --select-by last"
        )
    if opts.data is None:
        return
    try:
        n = len(list_hs_files(find_hs_dir(Path(opts.data))))
    except (TrainDraftError, OSError):
        return  # the route refuses the data itself, naming it
    if n < 2:
        raise TrainDraftError(
            f"--select-by predicted-accept: --data {opts.data} holds {n} sample(s), none held out "
            f"(the epochs would be scored on what they trained on); give more samples (each "
            f"route holds out the files past --train-ratio), or --select-by last"
        )


def _number(v) -> float | None:
    """A finite score, else None (never the best)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _shown(score: float | None) -> str:
    return "n/a" if score is None else f"{score:.4f}"


def read_record(raw, epochs_done: int, where: str) -> dict:
    """The selection entry of a checkpoint's state.json, checked (BadInput naming `where` and the key)."""

    field({RECORD: raw}, RECORD, dict, where)
    field(raw, "select_by", str, where, choices=SELECT_BY)
    field(raw, "criterion", dict, where, optional=True)
    kept = field(raw, "kept_epoch", int, where, optional=True, minimum=1, maximum=epochs_done)
    field(raw, "kept_score", (int, float), where, optional=True)
    scores = field(raw, "scores", list, where)
    for i, s in enumerate(scores):
        at = f"{where}: scores[{i}]"
        field(s, "epoch", int, at, minimum=1, maximum=epochs_done)
        field(s, "score", (int, float), at, optional=True)
    if kept is None and scores:
        raise BadInput(where, "scores without a kept_epoch")
    return raw


def draft_files(folder: Path) -> list[str]:
    """The top-level files of an output that make up the draft (its subfolders and run files are the run's)."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink() and p.name not in RUN_FILES)


class Keeper:
    """The selection of one run: every epoch's score and the epoch whose draft --out holds."""

    def __init__(self, select_by: str, scorer=None):
        self.select_by, self.scorer = select_by, scorer
        self.criterion = getattr(scorer, "criterion", None) if scorer is not None else None
        self.scores: list[dict] = []
        self.kept_epoch: int | None = None
        self.kept_score: float | None = None
        self.rescore = False  # score the draft --out holds before the next epoch's

    @classmethod
    def for_run(cls, opts, state: dict | None) -> "Keeper":
        """The selection of `opts`, continuing the one recorded in `state` (a resumed checkpoint's state.json)."""
        keeper = cls(opts.select_by, opts.epoch_scorer)
        if state is not None:
            keeper._resume(state)
        return keeper

    def _resume(self, state: dict) -> None:

        done = state.get("epochs_done") if isinstance(state.get("epochs_done"), int) else 1
        raw = state.get(RECORD)
        try:
            rec = None if raw is None else read_record(raw, done, f"checkpoint {RECORD}")
        except BadInput as e:
            raise TrainDraftError(f"--resume: {str(e).replace(chr(10), ' ')}; train afresh with --force") from None
        self.kept_epoch = (rec or {}).get("kept_epoch") or done
        if self.select_by != "predicted-accept":
            return
        if rec is not None and rec["select_by"] == "predicted-accept" and rec.get("criterion") == self.criterion:
            self.scores = [{**s, "score": _number(s.get("score"))} for s in rec["scores"]]
            self.kept_score = _number(rec.get("kept_score"))
            return
        why = (
            "were not scored (--select-by last)"
            if rec is None or rec["select_by"] != "predicted-accept"
            else "were scored with other settings"
        )
        say(
            f"--select-by predicted-accept: the epochs before this resume {why}: the draft --out holds "
            f"(epoch {self.kept_epoch}) is scored again first"
        )
        self.rescore = True

    def _score(self, files_from: Path, names: list[str], epoch: int, scratch: Path) -> tuple[float | None, dict]:
        """The scorer on a folder holding only these draft files (hard links)."""
        d = scratch / f"epoch-{epoch}"
        d.mkdir()
        for n in names:
            link_or_copy(files_from / n, d / n)
        try:
            got = self.scorer(d)
        except TrainDraftError as e:
            raise TrainDraftError(
                f"--select-by {self.select_by}: epoch {epoch}'s draft could not be scored: {e}; "
                f"this epoch is not saved (--out is as it was): fix that and continue with "
                f"--resume, or continue with --resume --select-by last"
            ) from None
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], dict)):
            raise TypeError(f"epoch_scorer returned {got!r}: expected (score, details dict)")
        return _number(got[0]), dict(got[1])

    def choose(self, tmp: Path, out: Path, state_path: Path) -> None:
        """After the route built this epoch's output in `tmp` (its checkpoint state at `state_path`): score its
        draft, put the kept draft in `tmp`, record the selection in the state (rank 0 only)."""
        import tempfile

        state = json.loads(state_path.read_text())
        epoch = int(state["epochs_done"])
        mine = draft_files(tmp)
        if self.scorer is None:
            self.kept_epoch = epoch
        else:
            real = Path(os.path.abspath(out))
            scratch = Path(tempfile.mkdtemp(prefix=f".{real.name}.select-", dir=real.parent))
            try:
                if self.rescore:
                    self.kept_score, details = self._score(real, self._kept_files(real), self.kept_epoch, scratch)
                    self.scores.append({**details, "epoch": self.kept_epoch, "score": self.kept_score})
                    self.rescore = False
                    say(f"epoch {self.kept_epoch} (the draft --out holds): {self._name} {_shown(self.kept_score)}")
                score, details = self._score(tmp, mine, epoch, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            self.scores.append({**details, "epoch": epoch, "score": score})
            self._keep_best(tmp, real, mine, epoch, score)
        state[RECORD] = self.summary()
        state_path.write_text(json.dumps(state, indent=2, default=str) + "\n")

    def _kept_files(self, real: Path) -> list[str]:
        names = draft_files(real) if real.is_dir() else []
        if "config.json" not in names:
            raise TrainDraftError(
                f"--resume: {real} holds no draft (config.json) to compare the next epochs with; "
                f"train afresh with --force"
            )
        return names

    @property
    def _name(self) -> str:
        return getattr(self.scorer, "name", "score")

    def _keep_best(self, tmp: Path, real: Path, mine: list[str], epoch: int, score: float | None) -> None:
        if (
            self.select_by == "last"
            or self.kept_epoch is None
            or (score is not None and (self.kept_score is None or score > self.kept_score))
        ):
            self.kept_epoch, self.kept_score = epoch, score
            say(
                f"epoch {epoch}: {self._name} {_shown(score)}; --out keeps epoch {epoch}"
                + ("" if self.select_by == "last" else " (the best so far)")
            )
            return
        for n in mine:
            (tmp / n).unlink()
        for n in self._kept_files(real):
            link_or_copy(real / n, tmp / n)
        say(
            f"epoch {epoch}: {self._name} {_shown(score)}; --out keeps epoch {self.kept_epoch} "
            f"({_shown(self.kept_score)}, the best so far)"
        )

    def summary(self) -> dict:
        """What the run's summary (--json) and the checkpoint state record."""
        return {
            "select_by": self.select_by,
            **({"criterion": self.criterion} if self.criterion else {}),
            "kept_epoch": self.kept_epoch,
            "kept_score": self.kept_score,
            "scores": list(self.scores),
        }
