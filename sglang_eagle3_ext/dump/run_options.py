"""What `dump run` sends, where, and how, what `dump export` and `dump status` read; each field with a command
line is declared here once (`options.schema.flag`), and `cli/dump.py` derives the sub-commands' parsers from it."""

from __future__ import annotations

import dataclasses

from ..options import values
from ..options.schema import flag
from . import exporters

# the argparse types of the dump folder and the samples file, shared by `dump export` and `dump status`
DUMP_DIR = values.folder_in(
    "give the folder the server dumps into (its SGLANG_EAGLE3_EXT_DUMP_DIR)",
    "--dump-dir takes the dump folder; pass a JSONL prompts file to `dump run --data`",
)
PROMPTS = values.file_in(
    "give a JSONL file of samples (input lines: see `dump --help`)",
    "--data takes the JSONL file of samples; pass a dump folder as --dump-dir",
)


@dataclasses.dataclass(kw_only=True)
class RunOptions:
    """What `run` sends, where, and how."""

    url: str = flag("http://127.0.0.1:30000", type=values.server_url, help="the dumping SGLang server")
    # the JSONL dataset
    data: str = flag(required=True, metavar="PATH", type=PROMPTS, help="JSONL dataset (input lines: see above)")
    # the server's dump dir, as seen from here
    dump_dir: str = flag(
        required=True, type=DUMP_DIR, help="the server's SGLANG_EAGLE3_EXT_DUMP_DIR, as seen from here"
    )
    concurrency: int = flag(8, type=values.positive_int, help="requests in flight")
    # the model whose tokenizer turns text/messages into token ids
    target: str | None = flag(
        None,
        metavar="DIR",
        aliases="--tokenizer",
        help="target model dir or HF id whose tokenizer turns text/messages into token ids (needed for "
        "them: a tokenizer is never loaded from a path the server names)",
    )
    trust_remote_code: bool = flag(
        False, action="store_true", help="let --target's tokenizer run the code it ships (only for a model you trust)"
    )
    # the target writes a response first; prompt+response is dumped
    generate: bool = flag(False, action="store_true", help="target writes a response first; dump prompt+response")
    max_new_tokens: int = flag(512, type=values.positive_int, help="response length with --generate")
    temperature: float = flag(0.0, type=values.non_negative_float, help="sampling temperature with --generate")
    limit: int | None = flag(None, type=values.positive_int, help="send only the first N samples")
    timeout: float = flag(
        600.0, type=values.positive_float, metavar="S", help="seconds for one request, all of its reply included"
    )
    wait_s: float = flag(300.0, type=values.non_negative_float, help="how long to wait for the last writes")
    progress: bool = True  # a progress bar


@dataclasses.dataclass(kw_only=True)
class ExportOptions:
    """What `dump export` reads and writes."""

    dump_dir: str = flag(
        required=True, type=DUMP_DIR, help="the dump directory (the server's SGLANG_EAGLE3_EXT_DUMP_DIR)"
    )
    to: str = flag(required=True, choices=exporters.names, help="output format")
    out: str = flag(
        required=True, type=values.folder_out("give a new or empty folder for the export"), help="output directory"
    )
    data: str | None = flag(None, type=PROMPTS, help="the JSONL used for the dump: sample order and loss_mask fields")
    workers: int = flag(
        8,
        type=values.positive_int,
        help="samples converted in parallel (threads: file io and tensor copies release the GIL)",
    )
    progress: bool = True  # a progress bar


@dataclasses.dataclass(kw_only=True)
class StatusOptions:
    """What `dump status` reads."""

    dump_dir: str = flag(required=True, type=DUMP_DIR, help="the dump directory")
