"""What `sglang-eagle3 tiny` takes, each flag declared once here (`options.schema.flag`; `cli/tiny.py` derives
the parser), and what it does with it: the checks that come before minutes of work, then the target and its
sample dump."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Callable

from ..boundary import BadInput, Refused
from ..options import values
from ..options.schema import flag
from . import deepseek_v3

SAMPLE_DUMP = ("sample_dump", "samples", "dump_layers", "prompts", "max_new_tokens")  # one --help group
SAMPLE_DUMP_TITLE = "a sample dump on CPU (--sample-dump)"
_PROMPTS = "give a JSONL file of token-id prompts, one per line as `dump run --data` reads them"
_LAYERS_ENV = "SGLANG_EAGLE3_EXT_DUMP_LAYERS"


def _dump_layers(text: str):
    """--dump-layers: the dump variable's own rule (a layout name is checked here, its layers once the target is
    known)."""
    from ..dump.config import DumpConfigError, layers_text, parse_layers

    try:
        layers_text(text, "--dump-layers")
        return parse_layers(text)
    except DumpConfigError as e:
        raise argparse.ArgumentTypeError(str(e).replace(_LAYERS_ENV, "--dump-layers")) from None


@dataclasses.dataclass(kw_only=True)
class TinyOptions:
    """Which tiny target to write, and whether a sample dump of it too."""

    out: str | None = flag(
        None,
        names="out",
        nargs="?",
        type=values.folder_out("give a new or empty folder, or leave OUT out (the cache)"),
        help=f"output folder, new or empty (default: the cache, {deepseek_v3.default_dir()}); one holding other "
        f"files is refused, one holding this target is reused",
    )
    predictable: bool = flag(
        False,
        action="store_true",
        help="a target whose greedy continuation a draft can learn (each token leans on a fixed "
        "successor); the plain random target's greedy outputs are chaotic and no draft learns them",
    )
    seed: int = flag(0, type=int, help="weights' random seed")
    kimi: bool = flag(
        False,
        action="store_true",
        help="wrap it as Kimi-K2.5 (KimiK25ForConditionalGeneration with a tiny vision tower)",
    )
    sample_dump: str | None = flag(
        None,
        metavar="DIR",
        type=values.folder_out("give a new or empty folder"),
        help="also write the target's hidden states for --samples prompts into DIR (new or empty), as "
        "the dumping server would: the aux layers it captures by default, the final state",
    )
    samples: int = flag(64, type=values.positive_int, help="prompts to dump (about a second each on a CPU)")
    dump_layers: list | None = flag(
        None,
        metavar="LAYERS",
        type=_dump_layers,
        help=f"the aux layers to dump, as {_LAYERS_ENV} takes them: HF indices (1,2,3) or LAYOUT:N, "
        "the layers a fresh draft of that layout with N layers reads (dflash:1) (default: the dump's default)",
    )
    prompts: str | None = flag(
        None,
        metavar="FILE",
        type=values.file_in(_PROMPTS),
        help="a `dump run --data` file of token-id prompts (default: seeded random token ids)",
    )
    max_new_tokens: int = flag(
        32,
        type=values.non_negative_int,
        help="greedy answer tokens per prompt, dumped with it as `dump run --generate` does (0: the prompts alone)",
    )


def refuse_mixups(o: TinyOptions) -> None:
    """Refused before minutes of work: flags that do not go together, a used --sample-dump, bad --prompts."""
    if o.out and o.out.startswith("-"):  # never write a model into a folder named like an option
        raise Refused(f"{o.out!r} looks like an option, not a folder; see --help")
    if o.sample_dump and o.kimi:
        raise Refused("--sample-dump reads the DeepSeek-V3 target; drop --kimi")
    if o.dump_layers and not o.sample_dump:
        raise Refused("--dump-layers: the layers of --sample-dump; add --sample-dump DIR, or drop it")
    if o.prompts and not o.sample_dump:
        raise Refused("--prompts: the prompts of --sample-dump; add --sample-dump DIR, or drop --prompts")
    if o.sample_dump:
        from .sample_dump import file_prompts, refuse_used_folder

        refuse_used_folder(Path(o.sample_dump))
        if o.prompts:  # read now: a bad prompts file is found before the target is built
            try:
                file_prompts(Path(o.prompts), o.samples, deepseek_v3.TINY_CONFIG["vocab_size"], "--prompts file")
            except BadInput as e:
                raise Refused(f"--prompts {e}") from None


def make(o: TinyOptions, made: Callable[[str], None]) -> int | None:
    """The target (`made(folder)` once it is there) and, with --sample-dump, its dump: the samples written."""
    ensure = deepseek_v3.ensure_tiny_target
    if o.kimi:
        from .kimi_k25 import ensure_tiny_kimi_target as ensure
    target = ensure(o.out, seed=o.seed, **(deepseek_v3.PREDICTABLE if o.predictable else {}))
    made(target)
    if not o.sample_dump:
        return None
    from ..dump.config import DumpConfigError
    from .sample_dump import write_sample_dump

    try:
        return write_sample_dump(
            Path(target),
            Path(o.sample_dump),
            Path(o.prompts) if o.prompts else None,
            samples=o.samples,
            new_tokens=o.max_new_tokens,
            seed=o.seed,
            layers=o.dump_layers,
        )
    except DumpConfigError as e:  # the layers this target cannot give
        raise Refused(str(e).replace(_LAYERS_ENV, "--dump-layers")) from None
