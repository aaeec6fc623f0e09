"""`python -m sglang_eagle3_ext.convert SRC DST`: an EAGLE-3 draft SGLang loads exactly as trained.

Accepts speculators (`Eagle3Speculator`, `layers.0.*`), SpecForge / SGLang (`LlamaForCausalLMEagle3`,
`midlayer.*` or `layers.N.*`) and EAGLE-repo (`LlamaForCausalLM` + `draft_vocab_size`) checkpoints, and MLA
drafts (Kimi-K2.5's): SGLang's `Eagle3DeepseekV2ForCausalLM` as published and SpecForge's
`DeepseekV3ForCausalLMEagle3` (`midlayer.*`); a pre-fused `fused_qkv_a_proj_with_mqa` is split into the two
halves SGLang fuses itself. `--force` replaces only a previous output of convert, never a dir holding SRC.
Writes key names for the installed (or named) SGLang release, the aux layer ids that release
needs, and the trained HF hidden-state indices (eagle_config.hf_hidden_state_indices). Refuses anything SGLang
cannot reproduce. Output is written to a temp dir beside DST and renamed into place.
"""

from __future__ import annotations

import dataclasses
import sys

from ..draft.convert import convert
from ..draft.errors import DraftError
from ..options.values import folder_in, folder_out
from . import common as cli_common
from .output import library_output


def _int_list(s: str) -> list[int]:
    import argparse

    try:
        return [int(x) for x in s.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 3,31,59, got {s!r}") from None


def build_parser():

    ap = cli_common.parser("convert", cli_common.doc_description(__doc__))
    ap.add_argument(
        "src",
        type=folder_in("give the draft's checkpoint folder (config.json + weights)"),
        help="the draft to convert (speculators / SpecForge / EAGLE checkpoint folder)",
    )
    ap.add_argument(
        "dst",
        type=folder_out("give a new or empty folder (--force replaces an earlier output of convert)"),
        help="output folder (must be empty or absent, or --force)",
    )
    cli_common.add_sglang_release(ap, "target SGLang release")
    ap.add_argument(
        "--hf-indices", type=_int_list, help="HF hidden_states indices the draft was trained on, e.g. 3,31,59"
    )
    ap.add_argument("--force", action="store_true", help="replace a non-empty DST")
    ap.add_argument("--allow-pickle", action="store_true", help="read .bin/.pt sources (torch.load weights_only=True)")
    cli_common.add_json_out(ap, "what was converted (or the problems refusing it)")
    cli_common.add_verbosity(ap, quiet="no progress bar")
    return cli_common.finish(ap, "convert")


def main(argv=None) -> int:

    a = build_parser().parse_args(argv)
    report: dict = {}
    say = (lambda msg: print(msg, file=sys.stderr)) if a.json == "-" else print  # stdout: the JSON only

    try:
        with library_output(a.verbose):
            convert(
                a.src,
                a.dst,
                a.sglang_version,
                a.hf_indices,
                a.force,
                a.allow_pickle,
                progress=not a.quiet,
                log=say,
                report=report,
            )
    except DraftError as e:
        head, *problems = str(e).splitlines()
        said = head.removeprefix("convert: ")
        said = said if str(a.src) in said else f"{a.src}: {said}"  # the refusal names the draft it refused
        print(cli_common.error_line("convert", said), *problems, sep="\n", file=sys.stderr)
        if a.json:
            cli_common.write_json(
                a.json,
                {
                    "ok": False,
                    "src": a.src,
                    "dst": a.dst,
                    "refused": head,
                    "problems": [dataclasses.asdict(p) for p in e.problems],
                },
            )
        return cli_common.EXIT_BAD_INPUT
    if a.json:
        cli_common.write_json(a.json, {"ok": True, **report})
    return cli_common.EXIT_OK


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("convert", main))
