"""The score of `train --select-by predicted-accept`: the accept length `eval` predicts for an epoch's draft on
the samples train holds out of the same data (evaluate.py, the figure `sglang-eagle3 eval` prints), for
training/selection.py to keep the best epoch in --out. It lives here, not in training/, because acceptance reads
with training's readers.

A speculators-format draft (the Llama route's output) is converted into SGLang's layout first (draft/convert.py,
for the installed release, else the newest supported one: what eval judges by), in a scratch folder beside the
draft; the MLA route already writes SGLang's layout.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..boundary import BadInput, Refused, read_json_file
from ..draft.convert import convert
from ..draft.errors import DraftError
from ..training.options import ScoreOptions, TrainOptions
from ..training.report import TrainDraftError
from .evaluate import EvalOptions, evaluate, settings_problem

DEFAULT_STEPS = 3  # --speculative-num-steps the prediction is for (eval's default)


@dataclasses.dataclass(frozen=True)
class PredictedAccept:
    """draft folder -> (predicted accept length, details); TrainDraftError naming the fix when it cannot score."""

    data: str
    target: str
    heldout_fraction: float
    steps: int = DEFAULT_STEPS
    samples: int | None = None  # the first this many held-out samples (None: all)
    device: str | None = None  # None: cuda when there is one
    dtype: str = "bf16"  # as served
    name = "predicted accept length"

    @property
    def criterion(self) -> dict:
        """What makes two runs' scores comparable (a resumed run checks it)."""
        return {
            "score": "predicted_accept_length",
            "steps": self.steps,
            "samples": self.samples,
            "heldout_fraction": self.heldout_fraction,
            "dtype": self.dtype,
        }

    def __call__(self, draft) -> tuple[float | None, dict]:
        import tempfile

        draft = Path(draft)
        try:
            with tempfile.TemporaryDirectory(prefix=".served-", dir=draft.parent) as tmp:
                served = _served_layout(draft, Path(tmp) / "sglang")
                rep = evaluate(
                    EvalOptions(
                        draft=str(served),
                        data=str(self.data),
                        target=str(self.target),
                        steps=self.steps,
                        heldout_fraction=self.heldout_fraction,
                        samples=self.samples,
                        device=self.device,
                        dtype=self.dtype,
                    )
                )
        except (Refused, BadInput, DraftError) as e:
            raise TrainDraftError(str(e).replace("\n", " ")) from None
        score = rep["predicted_accept_length"]
        return score, {
            "predicted_accept_length": score,
            "steps": self.steps,
            "positions": [p["p"] for p in rep["rounds"]["positions"]],
            "samples": rep["heldout"]["samples"],
            "seconds": rep["seconds"],
        }


def _served_layout(draft: Path, scratch: Path) -> Path:
    """`draft` itself when SGLang serves it as is, else its conversion into `scratch`."""
    from ..versions import SUPPORTED_MAX, installed_version

    cfg = read_json_file(draft / "config.json", "draft config")
    if not (cfg.get("speculators_model_type") or "transformer_layer_config" in cfg):
        return draft
    return convert(
        draft, scratch, sglang_version=installed_version() or SUPPORTED_MAX, progress=False, log=lambda *a, **k: None
    )


def epoch_scorer(options, steps: int | None = None, samples: int | None = None) -> PredictedAccept:
    """The scorer of a training run (`options`: its TrainOptions) on the split it holds out; TrainDraftError
    naming the flag when there is nothing to score on or a setting cannot be simulated."""

    steps = DEFAULT_STEPS if steps is None else steps
    for flag, v in (("--select-steps", steps), ("--select-samples", samples)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise TrainDraftError(f"{flag} {v!r}: expected an integer >= 1")
    problem = settings_problem(steps, 1, None)
    if problem:
        raise TrainDraftError(f"--select-steps {steps}: {problem}")
    ratio = options.train_ratio
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0 < ratio < 1:
        raise TrainDraftError(
            f"--select-by predicted-accept with --train-ratio {ratio!r}: nothing is held out to "
            f"score the epochs on; give --train-ratio below 1 (e.g. 0.95), or --select-by last"
        )
    return PredictedAccept(
        data=str(options.data),
        target=str(options.target),
        heldout_fraction=round(1.0 - ratio, 12),
        steps=steps,
        samples=samples,
        device=options.device,
    )


SCORE_FIELDS = tuple(f.name for f in dataclasses.fields(ScoreOptions))  # train's flags that shape the score only


def scored(options: TrainOptions, steps: int | None = None, samples: int | None = None) -> TrainOptions:
    """`options` with the epoch scorer its --select-by names (predicted-accept: `epoch_scorer`), as the train and
    build commands run it; with --select-by last, as they are."""
    if options.select_by == "predicted-accept":
        options.epoch_scorer = epoch_scorer(options, steps, samples)
    return options


def train_options(fields: dict) -> TrainOptions:
    """The TrainOptions of train's settings by field name (TrainOptions' and ScoreOptions'), scored as `scored`."""
    score = {k: fields[k] for k in SCORE_FIELDS if k in fields}
    opts = TrainOptions(**{k: v for k, v in fields.items() if k not in score})
    return scored(opts, score.get("select_steps"), score.get("select_samples"))
