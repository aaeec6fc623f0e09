"""What one build is asked to do (`BuildOptions`): where the prompts and the dump come from, the folders, and the
settings of each stage; the training settings are `TrainOptions` fields, passed through unchanged."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

from ..boundary import BadInput, Refused, regular_file
from . import STAGES

DEFAULT_SERVER_WAIT_S = 1800.0


@dataclasses.dataclass
class BuildOptions:
    out: str  # every stage's output folder lives here
    target: str | None = None  # the target's local folder (served, tokenizer, train, check, eval)
    data: str | None = None  # the prompts (JSONL), for the dump stage
    dump_dir: str | None = None  # an existing dump: the dump stage is skipped
    url: str | None = None  # a running dumping server
    preset: str | None = None  # or a server build starts (launch preset) and stops after
    port: int = 30000
    server_wait_s: float = DEFAULT_SERVER_WAIT_S
    generate: bool = False
    max_new_tokens: int = 512
    temperature: float = 0.0
    concurrency: int = 8
    limit: int | None = None
    trust_remote_code: bool = False
    timeout: float = 600.0
    wait_s: float = 300.0
    export_workers: int = 8
    gpus: int = 1  # >1: train under torchrun, one process per GPU
    spec_steps: int = 3  # --speculative-num-steps the prediction and the serve command use
    eval_samples: int | None = None
    eval_dtype: str = "bf16"
    serve_preset: str | None = None  # the preset of the serve command (default: the dump preset's twin)
    from_stage: str | None = None
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
