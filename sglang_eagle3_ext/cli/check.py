"""`python -m sglang_eagle3_ext.check DRAFT [--target DIR] [--data DIR] [--sglang X] [--headers-only]`

Offline, CPU-only: will SGLang serve this draft as trained? (exit 0 yes, 1 no: every problem listed, 2 bad input)

Reads config.json, every safetensors header and every weight once (the NaN/Inf scan the loader refuses on;
`--headers-only` skips it and the verdict says "values not scanned"), applies the same rules as the strict loader,
prints which SGLang class builds the draft (LlamaForCausalLMEagle3, the MLA Eagle3DeepseekV2ForCausalLM or
DFlash's DFlashDraftModel), what would load and every problem. DRAFT may be a hub id (org/name): read from the
local Hugging Face cache only; not cached: "NOT checked", exit 2.
"""

from __future__ import annotations

import sys

from ..draft.check import check_draft, report_dict
from ..draft.options import CheckOptions
from ..options.parser import add_options, options_from
from ..options.values import add_sglang_release
from ..training.data import captured_layers
from . import args as cli_args
from .run import run_command


def build_parser():

    ap = cli_args.parser("check", cli_args.doc_description(__doc__, paragraphs=2))
    add_options(ap, CheckOptions, skip=("scan_values",))
    add_sglang_release(ap, "check against this release")
    add_options(ap, CheckOptions, only=("scan_values",))
    cli_args.add_json_out(ap, "the report")
    cli_args.add_verbosity(ap, quiet="no progress line while the weights are scanned")
    return cli_args.finish(ap, "check")


def _verdict(rep) -> int:
    if not rep.checked or rep.config_unreadable:
        return 2  # nothing could be read, or judged without its config: bad input, not a verdict
    return 1 if rep.errors else 0


def main(argv=None) -> int:

    a = build_parser().parse_args(argv)
    o = options_from(a, CheckOptions)
    o.check_local()  # a bad path, not a verdict on a draft
    captured = captured_layers(o.data) if o.data else None
    return run_command(
        "check",
        lambda: check_draft(
            o.draft, o.target, a.sglang_version, o.scan_values, progress=not a.quiet, captured=captured
        ),
        lambda rep: rep.render(),
        json=a.json,
        as_json=report_dict,
        verbose=a.verbose,
        verdict=_verdict,
    )


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("check", main))
