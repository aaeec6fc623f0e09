"""What one build is asked to do (`BuildOptions`): where the prompts and the dump come from, the folders, and the
settings of each stage; the training settings are `TrainOptions` fields, passed through unchanged."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

from ..boundary import BadInput, Refused, regular_file
from ..launch.presets import preset as preset_arg
from ..options import values
from ..options.schema import flag
from . import STAGES

DEFAULT_SERVER_WAIT_S = 1800.0


TARGET = values.folder_in("give the target model's local folder")
CONFIG = values.file_in("give a YAML file of build's and train's flags")
# the argument group of `build --help` each field's flag is listed under (the rest: at the top)
GROUPS = {
    "dump": (
        "data",
        "dump_dir",
        "url",
        "preset",
        "port",
        "server_wait_s",
        "generate",
        "max_new_tokens",
        "temperature",
        "concurrency",
        "limit",
        "trust_remote_code",
        "timeout",
        "wait_s",
        "export_workers",
    ),
    "eval and serving": ("spec_steps", "eval_samples", "eval_dtype", "serve_preset"),
    "running": ("gpus", "from_stage"),
}
# train's flags that build sets itself (its folders, resuming, planning): left out of its train group and --config
TRAIN_SET_BY_BUILD = ("data", "target", "out", "force", "resume", "dry_run")


@dataclasses.dataclass(kw_only=True)
class BuildOptions:
    """One build; each field with a command line is declared here once (`options.schema.flag`), and
    `cli/build.py` derives its parser from it (train's flags: TrainOptions', passed through in `train`)."""

    # every stage's output folder lives here
    out: str = flag(
        type=values.folder_out("give a new or empty folder, or an earlier build's"),
        help="where every stage's output goes (new, empty, or an earlier build's)",
    )
    # the target's local folder (served, tokenizer, train, check, eval)
    target: str | None = flag(
        None,
        type=TARGET,
        aliases="--model-path",
        help="the target model's local folder (served for the dump, its tokenizer, train, check, eval)",
    )
    # the prompts (JSONL), for the dump stage
    data: str | None = flag(
        None,
        metavar="PROMPTS",
        type=values.file_in(
            "give the JSONL prompts file to dump",
            "--data takes the JSONL prompts file; to start from an existing dump, pass it as --dump-dir",
        ),
        help='JSONL prompts ({"id", "input_ids" | "text" | "messages"}) to dump',
    )
    # an existing dump: the dump stage is skipped
    dump_dir: str | None = flag(
        None,
        metavar="DIR",
        type=values.folder_in(
            "give the folder a dumping server wrote (its SGLANG_EAGLE3_EXT_DUMP_DIR)",
            "--dump-dir takes a dump folder; pass a prompts file as --data",
        ),
        help="start from this existing dump (the dump stage is skipped)",
    )
    url: str | None = flag(
        None, type=values.server_url, help="a running dumping server (its dump folder must be OUT/dump)"
    )
    # or a server build starts (launch preset) and stops after
    preset: str | None = flag(
        None,
        metavar="NAME",
        type=preset_arg,
        help="start a dumping server with this launch preset and --target, stopped when the dump is done",
    )
    port: int = flag(30000, type=values.port, help="the port of the server --preset starts")
    server_wait_s: float = flag(
        DEFAULT_SERVER_WAIT_S,
        type=values.positive_float,
        help="how long the server --preset starts may take to become healthy",
    )
    generate: bool = flag(
        False, action="store_true", help="the target answers each prompt first; prompt + answer is dumped"
    )
    max_new_tokens: int = flag(512, type=values.positive_int, help="answer length with --generate")
    temperature: float = flag(0.0, type=values.non_negative_float, help="sampling temperature with --generate")
    concurrency: int = flag(8, type=values.positive_int, help="dump requests in flight")
    limit: int | None = flag(None, type=values.positive_int, help="dump only the first N prompts")
    trust_remote_code: bool = flag(
        False,
        action="store_true",
        help="let --target's tokenizer run the code it ships (text prompts; only a model you trust)",
    )
    timeout: float = flag(600.0, type=values.positive_float, help="seconds for one dump request")
    wait_s: float = flag(300.0, type=values.non_negative_float, help="how long to wait for the last writes")
    export_workers: int = flag(8, type=values.positive_int, help="samples exported in parallel")
    # --speculative-num-steps the prediction and the serve command use
    spec_steps: int = flag(
        3, type=values.positive_int, help="--speculative-num-steps of the prediction and of the serve command"
    )
    eval_samples: int | None = flag(
        None, type=values.positive_int, help="predict on at most this many held-out samples"
    )
    eval_dtype: str = flag("bf16", choices=("bf16", "fp32"), help="eval's weights and activations")
    # the preset of the serve command (default: the dump preset's twin)
    serve_preset: str | None = flag(
        None,
        metavar="NAME",
        help="the preset of the serve command (default: the dump preset's serving twin, NAME-dump -> NAME)",
    )
    # >1: train under torchrun, one process per GPU
    gpus: int = flag(1, type=values.positive_int, help="train on this many GPUs (torchrun) when > 1")
    from_stage: str | None = flag(None, names="--from", choices=STAGES, help="redo this stage and the ones after it")
    train: dict = dataclasses.field(default_factory=dict)  # TrainOptions fields (data/target/out: build's)
    say: Callable[[str], None] = print
    quiet: bool = False

    def check(self) -> None:
        """Refused (exit 2) naming the first missing, contradictory or unreadable input; a file is checked by
        its kind before anything opens it (a FIFO or device would block or never end)."""
        if self.from_stage is not None and self.from_stage not in STAGES:
            raise Refused(f"--from {self.from_stage!r}: expected one of {', '.join(STAGES)}")
        if not self.target:
            raise Refused("--target is required: the target model's local folder (config.json + weights)")
        if not os.path.isdir(self.target):
            raise Refused(f"--target {self.target}: not a folder; give the target model's local folder")
        _file(Path(self.target) / "config.json", f"--target {self.target}", "config.json")
        if not 1 <= self.port <= 65535:
            raise Refused(f"--port {self.port}: expected a TCP port, 1 to 65535")
        init = self.train.get("init_from")
        if init and not os.path.isdir(init):
            raise Refused(
                f"--init-from {init}: not a folder; point it at a draft's folder (config.json + *.safetensors)"
            )
        if self.dump_dir:
            if self.url or self.preset:
                raise Refused(
                    "--dump-dir starts from an existing dump: leave out --url/--preset (they are for making one)"
                )
            _dump_dir(self.dump_dir)
            return
        kept = self.from_stage not in (None, "dump") and (Path(self.out) / "dump").is_dir()  # a later stage redone
        if not self.data and not kept:
            raise Refused("--data PROMPTS.jsonl is required to dump (or --dump-dir DIR to start from a dump)")
        if self.data:
            _file(self.data, f"--data {self.data}", "prompts file (JSONL)")
        if not kept and bool(self.url) == bool(self.preset):
            raise Refused(
                "to dump, give --url URL (a running dumping server) or --preset NAME (build starts one "
                "from --target and stops it after), not both or neither"
            )

    @property
    def dump_layers(self) -> str | None:
        """The aux layers the dump captures as train's settings name them (SGLANG_EAGLE3_EXT_DUMP_LAYERS' text):
        --layer-ids, else the layers a fresh --draft-arch draft of --num-layers layers reads; None when train
        names neither (the dumping server's own: its preset's, or the dump's default)."""
        from ..training.data import parse_layer_ids
        from ..training.options import FRESH_DEFAULTS

        ids = parse_layer_ids(self.train.get("layer_ids"))
        if ids:
            return ",".join(map(str, ids))
        arch = self.train.get("draft_arch")
        if arch and not self.train.get("init_from"):
            return f"{arch}:{self.train.get('num_layers') or FRESH_DEFAULTS['num_layers']}"
        return None

    @property
    def dump_path(self) -> Path:
        return Path(self.dump_dir) if self.dump_dir else Path(self.out) / "dump"


def _file(path, where: str, what: str) -> None:
    try:
        regular_file(path, what)
    except BadInput as e:
        raise BadInput(where, e.problem) from None


def _dump_dir(path) -> None:
    from ..dump.export import ExportError, require_dump_dir

    if os.path.exists(path) and not os.path.isdir(path):
        raise Refused(f"--dump-dir {path}: not a folder; give the folder a dump was written into")
    try:
        require_dump_dir(path)
    except ExportError as e:
        raise Refused(str(e)) from None
