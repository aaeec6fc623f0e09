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
from pathlib import Path

from ..boundary import Refused
from ..draft.check import check_draft, report_dict
from ..draft.hub import looks_like_hub_id
from ..draft.options import CheckOptions
from ..options.parser import add_options, options_from
from . import args as cli_args
from .run import run_command


def build_parser():

    ap = cli_args.parser("check", cli_args.doc_description(__doc__, paragraphs=2))
    add_options(ap, CheckOptions, skip=("scan_values",))
    cli_args.add_sglang_release(ap, "check against this release")
    add_options(ap, CheckOptions, only=("scan_values",))
    cli_args.add_json_out(ap, "the report")
    cli_args.add_verbosity(ap, quiet="no progress line while the weights are scanned")
    return cli_args.finish(ap, "check")


def _captured(data: str) -> tuple[list[int], str]:
    """(the HF indices --data holds, the file recording them): the metadata `train` reads them from."""
    from ..training.data import TrainDraftError, read_layer_ids_from_metadata

    try:
        ids, src = read_layer_ids_from_metadata(Path(data))
    except TrainDraftError as e:
        raise Refused(f"--data {data}: {e}") from None
    if ids is None:
        raise Refused(
            f"--data {data}: records no target layers (no dump_meta.json or metadata.json naming them); "
            f"give the dump dir or the `dump export` output the draft was trained on"
        )
    return ids, f"--data {data} ({src})"


def _verdict(rep) -> int:
    if not rep.checked or rep.config_unreadable:
        return 2  # nothing could be read, or judged without its config: bad input, not a verdict
    return 1 if rep.errors else 0


def main(argv=None) -> int:

    a = build_parser().parse_args(argv)
    o = options_from(a, CheckOptions)
    draft = Path(o.draft)
    if draft.exists() and not draft.is_dir():  # a bad path, not a verdict on a draft
        raise Refused(f"{o.draft}: is a file, not a draft folder (config.json + *.safetensors); name its folder")
    if not draft.exists() and not looks_like_hub_id(o.draft):
        raise Refused(f"{o.draft}: no such directory (and not a hub id org/name)")
    captured = _captured(o.data) if o.data else None
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
