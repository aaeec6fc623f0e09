"""`python -m sglang_eagle3_ext.check DRAFT [--target DIR] [--sglang-version X] [--scan-values]`

Offline, CPU-only: reads config.json and safetensors headers (plus the small d2t tensor), applies
the same rules as the strict loader, prints what would load and every problem; exit 1 on any.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from . import errors as E
from . import keys, rules
from .errors import Problem


@dataclasses.dataclass
class Report:
    draft: Path
    release: str
    loads: dict[str, str] = dataclasses.field(default_factory=dict)    # checkpoint key -> release name
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)
    renames: dict[str, int] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.errors]

    def render(self) -> str:
        lines = [f"draft {self.draft} for SGLang {self.release}:",
                 f"  would load {len(self.loads)} tensors; renames: {keys.summarize_renames(self.renames)}"]
        if self.ignored:
            lines.append("  ignored: " + "; ".join(f"{k} ({v})" for k, v in sorted(self.ignored.items())))
        for p in self.problems:
            lines.append(f"  {'warning' if p.warning else 'ERROR'} {p}")
        lines.append("  OK" if not self.errors else f"  {len(self.errors)} problem(s): not servable as is")
        return "\n".join(lines)


def check_draft(draft, target=None, sglang_version: str | None = None, scan_values: bool = False) -> Report:
    from .safetensors_io import FLOAT_DTYPES, count_non_finite, read_array, scan_headers

    draft = Path(draft)
    layout = keys.resolve_layout(sglang_version)
    rep = Report(draft, layout.release)
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
        target_name, refused = keys.to_release(canon, layout)
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
    ap = argparse.ArgumentParser(prog="python -m sglang_eagle3_ext.check", description=__doc__.split("\n")[2])
    ap.add_argument("draft")
    ap.add_argument("--target", help="target model dir (its config.json): hidden/vocab/layer checks")
    ap.add_argument("--sglang-version", help="check against this release (default: the installed one)")
    ap.add_argument("--scan-values", action="store_true", help="also scan every weight for NaN/Inf (reads all data)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    a = ap.parse_args(argv)
    rep = check_draft(a.draft, a.target, a.sglang_version, a.scan_values)
    if a.json:
        print(json.dumps({"release": rep.release, "loads": rep.loads, "ignored": rep.ignored, "renames": rep.renames,
                          "problems": [dataclasses.asdict(p) for p in rep.problems]}, indent=2))
    else:
        print(rep.render())
    return 1 if rep.errors else 0


if __name__ == "__main__":
    sys.exit(main())
