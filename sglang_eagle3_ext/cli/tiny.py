"""The built-in tiny targets: small random DeepSeek-V3 models that SGLang serves, made on first use.

    sglang-eagle3 tiny [OUT] [--predictable] [--seed N] [--kimi]
    sglang-eagle3 tiny [OUT] --predictable --sample-dump DIR [--samples N] [--prompts FILE] [--dump-layers L]

Writes one (with --kimi the Kimi-K2.5 wrapper around it) and prints its folder. --sample-dump also writes a
small dump of its hidden states, computed on this machine's CPU, in the format a dumping server writes:
`dump export`, `train`, `eval` take it as they take a served dump (no GPU needed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..boundary import BadInput
from ..options.values import file_in, folder_out
from ..tiny import deepseek_v3
from . import common as cli_common
from .output import library_output

_PROMPTS = "give a JSONL file of token-id prompts, one per line as `dump run --data` reads them"


def _dump_layers(text: str):
    """--dump-layers: the dump variable's own rule (a layout name is checked here, its layers once the target is
    known)."""
    from ..dump.config import DumpConfigError, layers_text, parse_layers

    try:
        layers_text(text, "--dump-layers")
        return parse_layers(text)
    except DumpConfigError as e:
        raise argparse.ArgumentTypeError(str(e).replace("SGLANG_EAGLE3_EXT_DUMP_LAYERS", "--dump-layers")) from None


def build_parser() -> argparse.ArgumentParser:
    ap = cli_common.parser("tiny", cli_common.doc_description(__doc__))
    ap.add_argument(
        "out",
        nargs="?",
        type=folder_out("give a new or empty folder, or leave OUT out (the cache)"),
        help=f"output folder, new or empty (default: the cache, "
        f"{deepseek_v3.default_dir()}); one holding other files is refused, one "
        f"holding this target is reused",
    )
    ap.add_argument(
        "--predictable",
        action="store_true",
        help="a target whose greedy continuation a draft can learn (each token leans on a fixed "
        "successor); the plain random target's greedy outputs are chaotic and no draft learns them",
    )
    ap.add_argument("--seed", type=int, default=0, help="weights' random seed")
    ap.add_argument(
        "--kimi",
        action="store_true",
        help="wrap it as Kimi-K2.5 (KimiK25ForConditionalGeneration with a tiny vision tower)",
    )
    g = ap.add_argument_group("a sample dump on CPU (--sample-dump)")
    g.add_argument(
        "--sample-dump",
        metavar="DIR",
        type=folder_out("give a new or empty folder"),
        help="also write the target's hidden states for --samples prompts into DIR (new or empty), as "
        "the dumping server would: the aux layers it captures by default, the final state",
    )
    g.add_argument(
        "--samples", type=cli_common.positive_int, default=64, help="prompts to dump (about a second each on a CPU)"
    )
    g.add_argument(
        "--dump-layers",
        metavar="LAYERS",
        type=_dump_layers,
        help="the aux layers to dump, as SGLANG_EAGLE3_EXT_DUMP_LAYERS takes them: HF indices (1,2,3) or LAYOUT:N, "
        "the layers a fresh draft of that layout with N layers reads (dflash:1) (default: the dump's default)",
    )
    g.add_argument(
        "--prompts",
        metavar="FILE",
        type=file_in(_PROMPTS),
        help="a `dump run --data` file of token-id prompts (default: seeded random token ids)",
    )
    g.add_argument(
        "--max-new-tokens",
        type=cli_common.non_negative_int,
        default=32,
        help="greedy answer tokens per prompt, dumped with it as `dump run --generate` does (0: the prompts alone)",
    )
    return cli_common.finish(ap, "tiny")


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.out and a.out.startswith("-"):  # never write a model into a folder named like an option
        raise cli_common.CliError(f"{a.out!r} looks like an option, not a folder; see --help")
    make = deepseek_v3.ensure_tiny_target
    if a.kimi:
        from ..tiny.kimi_k25 import ensure_tiny_kimi_target as make
    if a.sample_dump and a.kimi:
        raise cli_common.CliError("--sample-dump reads the DeepSeek-V3 target; drop --kimi")
    if a.dump_layers and not a.sample_dump:
        raise cli_common.CliError("--dump-layers: the layers of --sample-dump; add --sample-dump DIR, or drop it")
    if a.prompts and not a.sample_dump:
        raise cli_common.CliError("--prompts: the prompts of --sample-dump; add --sample-dump DIR, or drop --prompts")
    if a.sample_dump:
        from ..tiny.sample_dump import file_prompts, refuse_used_folder

        refuse_used_folder(Path(a.sample_dump))  # before minutes of work, not after
        if a.prompts:  # read now: a bad prompts file is found before the target is built
            try:
                file_prompts(Path(a.prompts), a.samples, deepseek_v3.TINY_CONFIG["vocab_size"], "--prompts file")
            except BadInput as e:
                raise cli_common.CliError(f"--prompts {e}") from None

    with library_output(verbose=False, bars=True):  # our progress lines, not transformers' bars
        target = make(a.out, seed=a.seed, **(deepseek_v3.PREDICTABLE if a.predictable else {}))
        print(target, flush=True)
        if a.sample_dump:
            from ..dump.config import DumpConfigError
            from ..tiny.sample_dump import write_sample_dump

            try:
                n = write_sample_dump(
                    Path(target),
                    Path(a.sample_dump),
                    Path(a.prompts) if a.prompts else None,
                    samples=a.samples,
                    new_tokens=a.max_new_tokens,
                    seed=a.seed,
                    layers=a.dump_layers,
                )
            except DumpConfigError as e:  # the layers this target cannot give
                raise cli_common.CliError(str(e).replace("SGLANG_EAGLE3_EXT_DUMP_LAYERS", "--dump-layers")) from None
    if a.sample_dump:
        print(
            f"wrote {n} samples into {a.sample_dump}; next: {cli_common.COMMAND} dump export --dump-dir "
            f"{a.sample_dump} --to speculators --out DIR",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(cli_common.run_tool("tiny", main))
