"""What `refresh` takes: the serving dump, the served draft, the gate and the training; each field with a
command line is declared here once (`options.schema.flag`), and `cli/refresh.py` derives its parser from it."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..acceptance.options import DTYPES
from ..options import values
from ..options.schema import flag
from ..training.train_flags import LOSS_IMPLS


@dataclasses.dataclass
class RefreshOptions:
    dump_dir: str = flag(
        required=True,
        type=values.folder_in("give the folder the server dumps into (its SGLANG_EAGLE3_EXT_DUMP_DIR)"),
        help="the serving dump (the server's SGLANG_EAGLE3_EXT_DUMP_DIR)",
    )
    # the draft being served (SGLang's layout); None: ask --swap's server
    draft: str | None = flag(
        type=values.folder_in("give the served draft's folder (SGLang's layout)"),
        help="the draft being served (SGLang's layout): training starts from "
        "its weights and the new one must beat it. Required without --swap; with --swap it must be the "
        "draft the server serves (default: that one)",
    )
    out: str = flag(
        required=True,
        type=values.folder_out("give a new folder for this refresh"),
        help="a new folder for this refresh (data/, train/, draft/, refresh.json)",
    )
    # None: the model path the dump records
    target: str | None = flag(
        None,
        type=values.folder_in("give the target model's folder"),
        help="the target's folder (default: the model path the dump records)",
    )
    margin: float = flag(
        0.05,
        type=values.non_negative_float,
        help="predicted accept length the new draft must gain to replace the current one",
    )
    min_samples: int = flag(32, type=values.positive_int, help="fewer new samples than this: nothing is trained")
    heldout_fraction: float = flag(
        0.1, type=values.number_in(0.0, 1.0, False), help="share of the new samples held out to judge both drafts on"
    )
    # only requests served with a lower accept length
    max_accept_len: float | None = flag(
        None,
        type=values.positive_float,
        help="use only requests the current draft served with an accept length below this",
    )
    epochs: int = flag(3, type=values.positive_int, help="training epochs over the new samples")
    lr: float = flag(3e-4, type=values.positive_float, help="peak learning rate")
    spec_steps: int = flag(
        3, type=values.positive_int, help="the server's --speculative-num-steps (topk 1) the prediction is for"
    )
    eval_samples: int | None = flag(
        None, type=values.positive_int, help="judge on at most this many held-out samples (default: all)"
    )
    device: str | None = flag(None, type=values.torch_device, help="torch device (default: cuda when there is one)")
    dtype: str = flag("bf16", choices=DTYPES, help="eval's weights and activations")
    workers: int = flag(4, type=values.positive_int, help="export threads")
    swap_url: str | None = flag(
        None,
        names="--swap",
        type=values.server_url,
        metavar="URL",
        help="a running EAGLE-3 server: swap an accepted draft into it (`sglang-eagle3 swap`)",
    )
    loss_impl: str | None = flag(None, choices=LOSS_IMPLS, help="train's --loss-impl")  # None: train's default
    swap_timeout: float = 600.0
    train_options: dict = dataclasses.field(default_factory=dict)  # more TrainOptions fields
    say: Callable[[str], None] | None = None
    # writes the final report (the command's --json), before the cursor records any sample as used
    report: Callable[[dict], None] | None = None
