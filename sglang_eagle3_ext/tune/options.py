"""What `tune` takes; each field with a command line is declared here once (`options.schema.flag`), in the
order `tune --help` lists them, and `cli/tune.py` derives its parser from it."""

from __future__ import annotations

import argparse
import dataclasses

from ..options import values
from ..options.schema import flag

DEFAULT_BACKENDS = ("fa3", "flashmla", "flashinfer", "triton")


def _levels(s: str) -> list[int]:
    try:
        out = sorted({int(x) for x in s.replace(" ", "").split(",") if x})
    except ValueError:
        out = []
    if not out or min(out) < 1 or max(out) > 4096:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers 1..4096, e.g. 1,4,16,32, got {s!r}")
    return out


def _names(s: str) -> tuple:
    out = tuple(x for x in s.replace(" ", "").split(",") if x)
    if not out:
        raise argparse.ArgumentTypeError(f"{s!r}: comma-separated backend names, e.g. fa3,flashmla,triton")
    return out


@dataclasses.dataclass(kw_only=True)
class TuneOptions:
    target: str = flag(
        required=True, type=values.folder_in("give the target model's folder"), help="the target model's folder"
    )
    draft: str = flag(
        required=True,
        type=values.folder_in("give the draft's folder, in the layout SGLang serves"),
        help="the EAGLE-3 draft's folder, in the layout SGLang serves",
    )
    data: str = flag(
        required=True,
        type=values.folder_in(
            "give the dump folder `sglang-eagle3 dump` wrote (or a training export)",
            "tune reads hidden states, not prompts: give a dump folder or a training export (prompts: --prompts)",
        ),
        help="your dump (or a training export): the accept side is simulated on its held-out samples",
    )
    prompts: str | None = flag(
        None,
        type=values.file_in("give a JSONL / ShareGPT / MT-bench prompts file"),
        help="your prompts (JSONL / ShareGPT / MT-bench) for the timed candidates (default: built-in random token ids)",
    )
    concurrency: list[int] = flag(
        parser_default="1,4,16,32", type=_levels, help="the concurrency bands to tune, e.g. 1,4,16,32"
    )
    budget_min: float | None = flag(
        None,
        type=values.number_in(0.0, 1e6),
        help="GPU minutes the run may spend (servers up x GPUs); it stops starting servers there",
    )
    backends: tuple = flag(
        DEFAULT_BACKENDS,
        parser_default=",".join(DEFAULT_BACKENDS),
        type=_names,
        help="attention backends to consider (those the release or GPU lack are left out, each with its reason)",
    )
    out: str = flag(
        "tune_out",
        type=values.folder_out("give a new folder, or an earlier run's"),
        help="folder for the presets, timings.json, tune.json, the plot",
    )
    # a recorded timing pass (skips it)
    timings: str | None = flag(
        None,
        type=values.file_in("give the timings.json an earlier tune run wrote"),
        help="a timings.json of an earlier run: no timing pass",
    )
    # True: the cost model's predictions only, no candidate's server started and benched
    no_measure: bool = flag(
        False, action="store_true", help="no measurement of the top candidates: the model's predictions only"
    )
    # measured candidates per band
    per_band: int = flag(2, type=int, choices=range(1, 5), metavar="{1..4}", help="candidates measured per band")
    # the measurements' request lengths
    new_tokens: tuple = flag(
        (64, 1024),
        parser_default="64:1024",
        type=values.new_tokens,
        help="the measurements' output lengths, N or LO:HI",
    )
    num_prompts: int | None = flag(None, type=values.positive_int, help="prompts per measurement")
    samples: int | None = flag(64, type=values.positive_int, help="held-out samples simulated")
    heldout_fraction: float = flag(
        0.05, type=values.number_in(0.0, 1.0), help="the share `train` held out of --data (1: every sample)"
    )
    device: str | None = flag(
        None, type=values.torch_device, help="torch device of the simulation (default: cuda when there is one)"
    )
    # extra SGLang arguments for every server (shell words)
    server_args: str = flag(
        "",
        help="more SGLang arguments for every server, one quoted string "
        '(e.g. "--mem-fraction-static 0.5 --max-total-tokens 65536"; default: none)',
    )
    trust_remote_code: bool = flag(False, action="store_true", help="let --target's tokenizer run its own code")
    dry_run: bool = flag(
        False,
        action="store_true",
        help="check every input and print the plan: backends and "
        "why, the servers a run starts, the budget; nothing loaded or started",
    )
    tokenizer: object = None  # gives the target's tokenizer (text prompts)
    command: str = ""  # the command line, for the presets' headers
    say: object = None
