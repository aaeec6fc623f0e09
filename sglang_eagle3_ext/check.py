"""`python -m sglang_eagle3_ext.check DRAFT [--target DIR] [--sglang-version X] [--scan-values]`

Offline, CPU-only: reads config.json and safetensors headers (plus the small d2t tensor), applies
the same rules as the strict loader, prints which SGLang class builds the draft (LlamaForCausalLMEagle3 or
the MLA Eagle3DeepseekV2ForCausalLM), what would load and every problem; exit 1 on any. DRAFT may be a hub
id (org/name): read from the local Hugging Face cache only; not cached: "NOT checked", exit 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from .draft import errors as E
from .draft import keys, mla, rules
from .draft.errors import Problem


@dataclasses.dataclass
class Report:
    draft: Path
    release: str
    loads: dict[str, str] = dataclasses.field(default_factory=dict)    # checkpoint key -> release name
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)
    renames: dict[str, int] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    draft_class: str | None = None     # the SGLang class that will build it (config architectures)
    note: str | None = None            # e.g. "hub id X: checked from the local cache"
    checked: bool = True               # False: a hub id not in the local cache, nothing was read

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.errors]

    def render(self) -> str:
        cls = f" ({self.draft_class})" if self.draft_class else ""
        lines = [f"draft {self.draft}{cls} for SGLang {self.release}:"] + ([f"  {self.note}"] if self.note else []) + [
                 f"  would load {len(self.loads)} tensors; renames: {keys.summarize_renames(self.renames)}"]
        if not self.checked:
            return "\n".join(lines[:2] + ["  NOT CHECKED"])
        if self.ignored:
            lines.append("  ignored: " + "; ".join(f"{k} ({v})" for k, v in sorted(self.ignored.items())))
        for p in self.problems:
            lines.append(f"  {'warning' if p.warning else 'ERROR'} {p}")
        lines.append("  OK" if not self.errors else f"  {len(self.errors)} problem(s): not servable as is")
        return "\n".join(lines)


def check_draft(draft, target=None, sglang_version: str | None = None, scan_values: bool = False) -> Report:
    from .draft.safetensors_io import FLOAT_DTYPES, count_non_finite, read_array, scan_headers

    from .draft.hub import resolve

    layout = keys.resolve_layout(sglang_version)
    local, hub_id, note = resolve(str(draft))
    rep = Report(Path(draft), layout.release, note=note)
    if local is None:
        if hub_id is not None:
            rep.checked = False
        else:
            rep.problems.append(Problem(E.CONFIG_MISSING, note))
        return rep
    draft = local
    cfg_path = draft / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        rep.problems.append(Problem(E.CONFIG_MISSING, f"{cfg_path}: unreadable ({e})"))
        cfg = None
    tensors, fp = scan_headers(draft)
    rep.problems += fp
    if cfg is None:
        return rep
    spec, cp = rules.spec_from_config(cfg, layout, where=str(cfg_path))
    rep.problems += cp
    rep.draft_class = spec.arch if spec is not None else next(
        (a for a in (cfg.get("architectures") or []) if a in (rules.ARCH, mla.ARCH)), None)
    if spec is None:
        return rep
    shapes = rules.expected_shapes(spec)
    present = set()
    for name, info in sorted(tensors.items()):
        where = str(info.file)
        canon, notes = keys.canonical(name)
        for n in notes:
            rep.renames[n] = rep.renames.get(n, 0) + 1
        if canon in present:
            rep.problems.append(Problem(E.UNEXPECTED_WEIGHT, f"{where}: {name} duplicates {canon}", key=canon))
            continue
        present.add(canon)
        why = keys.ignored_reason(canon, spec.embed_from_target)
        bad = rules.tensor_problems(canon, info.shape, spec, shapes, where)
        if why is not None:
            rep.ignored[name] = why
            rep.problems += bad
            continue
        target_name, refused = keys.to_release(canon, layout, mla=spec.mla)
        if refused:
            bad.append(refused)
        if not bad and canon == "d2t":
            bad += rules.d2t_problems(read_array(info), spec, where)
        if not bad and scan_values and info.dtype in FLOAT_DTYPES:
            n_bad = count_non_finite(info)
            if n_bad:
                bad.append(rules.non_finite_problem(canon, n_bad, info.numel, where))
        if target_name and target_name != canon:
            k = f"{canon.split('.')[0]}.* -> {target_name.split('.')[0]}.*"
            rep.renames[k] = rep.renames.get(k, 0) + 1
        rep.problems += bad
        if not bad:
            rep.loads[name] = target_name
    if tensors:
        rep.problems += rules.missing_problems(present, spec, str(draft))
    if target:
        tcfg_path = Path(target) / "config.json"
        try:
            rep.problems += rules.target_problems(spec, json.loads(tcfg_path.read_text()), f"{draft} vs {target}",
                                                  draft_cfg=cfg)
        except (OSError, ValueError) as e:
            rep.problems.append(Problem(E.CONFIG_MISSING, f"{tcfg_path}: unreadable target config ({e})"))
    return rep


def main(argv=None) -> int:
    from . import cli_common

    ap = argparse.ArgumentParser(prog="python -m sglang_eagle3_ext.check", description=__doc__.split("\n")[2])
    ap.add_argument("draft", help="the draft checkpoint folder (config.json + *.safetensors)")
    ap.add_argument("--target", help="target model dir (its config.json): hidden/vocab/layer checks")
    cli_common.add_sglang_release(ap, "check against this release")
    ap.add_argument("--scan-values", action="store_true", help="also scan every weight for NaN/Inf (reads all data)")
    cli_common.add_json_out(ap, "the report")
    a = cli_common.finish(ap, "check").parse_args(argv)
    from .draft.hub import looks_like_hub_id

    if not Path(a.draft).exists() and not looks_like_hub_id(a.draft):   # a bad path, not a verdict on a draft
        raise cli_common.CliError(f"{a.draft}: no such directory (and not a hub id org/name)")
    rep = check_draft(a.draft, a.target, a.sglang_version, a.scan_values)
    if a.json:
        cli_common.write_json(a.json, {"release": rep.release, "draft_class": rep.draft_class, "checked": rep.checked,
                                       "note": rep.note, "loads": rep.loads, "ignored": rep.ignored,
                                       "renames": rep.renames, "problems": [dataclasses.asdict(p) for p in rep.problems]})
    if a.json != "-":
        print(rep.render())
    if not rep.checked:
        return 2  # nothing could be read: bad input, not a verdict
    return 1 if rep.errors else 0


def describe_draft(path, sglang_version: str | None = None, target=None) -> dict:
    """What `bench` (and people) want to know about a draft, headers only: which SGLang class builds it,
    K, the recorded HF indices, EAGLE-3.1 flags, and whether `check` finds it servable. Without SGLang
    installed (a bench client) and no release named: judged for the newest supported release."""
    from .versions import SUPPORTED_MAX, installed_version

    sglang_version = sglang_version or installed_version() or SUPPORTED_MAX
    rep = check_draft(path, target=target, sglang_version=sglang_version)
    out = {"path": str(path), "draft_class": rep.draft_class, "release": rep.release, "checked": rep.checked,
           "note": rep.note, "ok": rep.checked and not rep.errors, "errors": [str(p) for p in rep.errors]}
    if rep.checked:
        from .draft.hub import resolve

        local = resolve(str(path))[0]
        cfg = json.loads((local / "config.json").read_text()) if local and (local / "config.json").is_file() else {}
        spec, _ = rules.spec_from_config(cfg, keys.resolve_layout(sglang_version)) if cfg else (None, [])
        if spec is not None:
            out.update(k=spec.k, aux_ids=list(spec.aux_ids or []), hf_indices=list(spec.hf_indices or []) or None,
                       hidden=spec.hidden, target_hidden=spec.target_hidden, draft_vocab=spec.draft_vocab,
                       fc_norm=spec.fc_norm, norm_output=bool(cfg.get("norm_output")), mla=spec.mla)
    return out


if __name__ == "__main__":
    from .cli_common import run_tool

    sys.exit(run_tool("check", main))
