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
from ..draft.options import ConvertOptions
from ..json_file import write_json
from ..options.parser import add_options, options_from
from ..options.values import add_sglang_release
from . import args as cli_args
from .run import one_line, run_command


def build_parser():

    ap = cli_args.parser("convert", cli_args.doc_description(__doc__))
    add_options(ap, ConvertOptions, only=("src", "dst"))
    add_sglang_release(ap, "target SGLang release")
    add_options(ap, ConvertOptions, skip=("src", "dst"))
    cli_args.add_json_out(ap, "what was converted (or the problems refusing it)")
    cli_args.add_verbosity(ap, quiet="no progress bar")
    return cli_args.finish(ap, "convert")


def main(argv=None) -> int:

    a = build_parser().parse_args(argv)
    o = options_from(a, ConvertOptions)
    report: dict = {}
    say = (lambda msg: print(msg, file=sys.stderr)) if a.json == "-" else print  # stdout: the JSON only

    def call() -> dict:
        convert(
            o.src,
            o.dst,
            a.sglang_version,
            o.hf_indices,
            o.force,
            o.allow_pickle,
            progress=not a.quiet,
            log=say,
            report=report,
        )
        return report

    def refused(e: BaseException) -> str:  # a draft's refusal: its problems a line each, and in --json
        if not isinstance(e, DraftError):
            return one_line(e)
        head, *problems = str(e).splitlines()
        said = head.removeprefix("convert: ")
        said = said if str(o.src) in said else f"{o.src}: {said}"  # the refusal names the draft it refused
        if a.json:
            problems_json = [dataclasses.asdict(p) for p in e.problems]
            refusal = {"ok": False, "src": o.src, "dst": o.dst, "refused": head, "problems": problems_json}
            write_json(a.json, refusal)
        return "\n".join([said, *problems])

    return run_command(
        "convert",
        call,
        json=a.json,
        as_json=lambda rep: {"ok": True, **rep},
        verbose=a.verbose,
        errors=(DraftError,),
        refused=refused,
    )


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("convert", main))
