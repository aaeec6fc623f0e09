"""Will SGLang serve this draft as trained? The verdict `check` prints and the launcher's pre-check acts on.

Offline, CPU-only: reads config.json, every safetensors header and (scan_values) every weight once for NaN/Inf,
and applies the rules the strict loader applies, through the draft's layout (draft/arch).

    check_draft(draft, target=None, sglang_version=None, scan_values=True, captured=None) -> Report
    describe_draft(path, sglang_version=None)  what `bench` wants to know: class, K, HF indices, servable
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..boundary import BadInput, read_json_file
from ..server.runtime import language_config
from . import arch as layouts
from . import errors as E
from . import keys, rules
from .errors import Problem
from .hub import resolve
from .progress import ByteProgress
from .safetensors_io import FLOAT_DTYPES, INT_DTYPES, count_non_finite, read_array, scan_headers
from .target import same_as_target_head


@dataclasses.dataclass
class Report:
    draft: Path
    release: str
    loads: dict[str, str] = dataclasses.field(default_factory=dict)  # checkpoint key -> release name
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)
    renames: dict[str, int] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    draft_class: str | None = None  # the SGLang class that will build it (config architectures)
    note: str | None = None  # e.g. "hub id X: checked from the local cache"
    checked: bool = True  # False: a hub id not in the local cache, nothing was read
    values_scanned: bool = True  # False: headers only, NaN/Inf weights not looked for
    config_unreadable: bool = False  # config.json is no JSON: nothing can be judged (bad input, not a verdict)
    scanned_bytes: int = 0
    spec: object = None  # the DraftSpec its config implies (None: no readable draft config)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.errors]

    def render(self) -> str:
        cls = f" ({self.draft_class})" if self.draft_class else ""
        lines = [f"draft {self.draft}{cls} for SGLang {self.release}:"] + ([f"  {self.note}"] if self.note else [])
        if any(p.code == E.NOT_A_DRAFT for p in self.problems):  # what the folder is, in one line
            return "\n".join(
                lines + [f"  ERROR {p}" for p in self.errors] + ["  not an EAGLE-3 draft: not servable as one"]
            )
        lines.append(f"  would load {len(self.loads)} tensors; renames: {keys.summarize_renames(self.renames)}")
        if not self.checked:
            return "\n".join(lines + ["  NOT CHECKED"])
        if self.ignored:
            lines.append("  ignored: " + "; ".join(f"{k} ({v})" for k, v in sorted(self.ignored.items())))
        if self.values_scanned and self.scanned_bytes:
            lines.append(f"  values: {self.scanned_bytes / 2**20:.1f} MiB of weights scanned for NaN/Inf")
        for p in self.problems:
            lines.append(f"  {'warning' if p.warning else 'ERROR'} {p}")
        unscanned = (
            ""
            if self.values_scanned
            else " (values not scanned: --headers-only; NaN/Inf would only be refused at load)"
        )
        lines.append(
            f"  OK{unscanned}" if not self.errors else f"  {len(self.errors)} problem(s): not servable as is{unscanned}"
        )
        return "\n".join(lines)


def _read_config(path: Path, rep: Report):
    try:
        return read_json_file(path, "draft config", expect=None)  # the rules judge its shape, naming each key
    except BadInput as e:
        rep.problems.append(Problem(E.CONFIG_MISSING, f"{e} (unreadable)"))
        rep.config_unreadable = True
        return None


def _draft_class(cfg, spec) -> str | None:
    if spec is not None:
        return spec.arch
    arch = layouts.find(cfg)
    return arch.ARCH if arch else None


def _what_folder(d: Path) -> Problem | None:
    """A folder without config.json that holds no weights either: what it is instead (None: it holds weights,
    the usual checks name what is missing)."""
    names = {p.name for p in d.iterdir()} if d.is_dir() else set()
    if any(n.endswith(".safetensors") and not n.startswith("hs_") for n in names):
        return None
    if "manifests" in names or "dump_meta.json" in names:
        what, fix = (
            "a hidden-state dump (what `dump run` writes)",
            "export it with `dump export`, train a draft on that, then check the draft",
        )
    elif "hidden_states" in names or any(n.startswith("hs_") for n in names):
        what, fix = "training data (hidden states for `train --data`)", "check the draft that `train --out` writes"
    else:
        what, fix = "no model folder (no config.json, no *.safetensors)", "point at the draft's folder"
    return Problem(E.NOT_A_DRAFT, f"{d}: this is {what}, not an EAGLE-3 draft; {fix}")


@dataclasses.dataclass
class _Ctx:
    spec: rules.DraftSpec
    layout: keys.Layout
    target: Path | None
    target_cfg: dict | None
    scan_values: bool
    progress: object | None


def _tensor_problems(rep: Report, name: str, info, canon: str, ctx: _Ctx, refused) -> list[Problem] | None:
    """Problems of one tensor SGLang would take (None: ignored, with the reason recorded)."""

    spec, where = ctx.spec, str(info.file)
    bad = rules.tensor_problems(canon, info.shape, spec, rules.expected_shapes(spec), where) + (
        [refused] if refused else []
    )
    if not bad and canon == rules.HEAD and rules.head_from_target(spec):
        why, problem = rules.trained_head(
            spec, info.shape, where, *same_as_target_head(info, ctx.target, ctx.target_cfg, info.shape)
        )
        if why:
            rep.ignored[name] = why
            return None
        bad.append(problem)
    if not bad and canon == "d2t":
        bad += (
            rules.d2t_problems(read_array(info), spec, where)
            if info.dtype in INT_DTYPES
            else [rules.d2t_dtype_problem(info.dtype, where)]
        )
    if not bad and ctx.scan_values and info.dtype in FLOAT_DTYPES:
        n_bad = count_non_finite(info, progress=ctx.progress)
        rep.scanned_bytes += info.end - info.begin
        if n_bad:
            bad.append(rules.non_finite_problem(canon, n_bad, info.numel, where))
    return bad


def _check_tensors(rep: Report, tensors: dict, ctx: _Ctx) -> set[str]:
    """Every checkpoint tensor against the rules; returns the canonical names present."""
    present = set()
    for name, info in sorted(tensors.items()):
        canon, notes = keys.canonical(name)
        for n in notes:
            rep.renames[n] = rep.renames.get(n, 0) + 1
        if canon in present:
            rep.problems.append(Problem(E.UNEXPECTED_WEIGHT, f"{info.file}: {name} duplicates {canon}", key=canon))
            continue
        present.add(canon)
        why = keys.ignored_reason(canon, ctx.spec.embed_from_target)
        if why is not None:
            rep.ignored[name] = why
            rep.problems += rules.tensor_problems(
                canon, info.shape, ctx.spec, rules.expected_shapes(ctx.spec), str(info.file)
            )
            continue
        target_name, refused = ctx.spec.layout_module.to_release(canon, ctx.layout)
        bad = _tensor_problems(rep, name, info, canon, ctx, refused)
        if bad is None:
            continue
        if target_name and target_name != canon:
            k = f"{canon.split('.')[0]}.* -> {target_name.split('.')[0]}.*"
            rep.renames[k] = rep.renames.get(k, 0) + 1
        rep.problems += bad
        if not bad:
            rep.loads[name] = target_name
    return present


def check_draft(
    draft,
    target=None,
    sglang_version: str | None = None,
    scan_values: bool = True,
    progress: bool = False,
    captured: tuple[list[int], str] | None = None,
) -> Report:
    """The verdict on `draft` for a release. scan_values: read every weight once for NaN/Inf (False: headers
    only, and the report says so); progress: a progress line on stderr while a long scan runs; captured: (the HF
    indices a dump or export holds, where they were read), which the draft must be fed."""

    layout = keys.resolve_layout(sglang_version)
    local, hub_id, note = resolve(str(draft))
    rep = Report(Path(draft), layout.release, note=note, values_scanned=scan_values)
    if local is None:
        if hub_id is not None:
            rep.checked = False
        else:
            rep.problems.append(Problem(E.CONFIG_MISSING, note))
        return rep
    cfg_path = local / "config.json"
    other = _what_folder(local) if not cfg_path.exists() else None
    if other is not None:  # no model folder at all: one line saying what it is, not a list of absent weights
        rep.problems.append(other)
        return rep
    cfg = _read_config(cfg_path, rep)
    spec, cp = rules.spec_from_config(cfg, layout, where=str(cfg_path)) if cfg is not None else (None, [])
    rep.draft_class = _draft_class(cfg, spec)
    rep.spec = spec
    if any(p.code == E.NOT_A_DRAFT for p in cp):
        rep.problems += cp  # one line saying what the folder holds; its weights are no draft's
        return rep
    tensors, fp = scan_headers(local)
    rep.problems += fp + cp
    if spec is None:
        return rep
    target = Path(target) if target else None
    tcfg = read_json_file(target / "config.json", "target config") if target else None  # bad input: exit 2
    total = sum(i.end - i.begin for i in tensors.values() if i.dtype in FLOAT_DTYPES) if scan_values else 0
    prog = ByteProgress("check: scanning values", total, enabled=progress)
    present = _check_tensors(rep, tensors, _Ctx(spec, layout, target, tcfg, scan_values, prog))
    prog.close()
    if tensors:
        rep.problems += rules.missing_problems(present, spec, str(local))
    if tcfg is not None:
        rep.problems += rules.target_problems(spec, tcfg, f"{local} vs {target}", draft_cfg=cfg)
    if captured is not None:
        n = language_config(tcfg).get("num_hidden_layers") if tcfg is not None else None
        where = f"{local} vs {captured[1]}"
        rep.problems += rules.captured_problems(
            spec, cfg, captured[0], n if isinstance(n, int) else None, layout, where
        )
    return rep


def report_dict(rep: Report) -> dict:
    """The report as `check --json` writes it."""
    return {
        "draft": str(rep.draft),
        "release": rep.release,
        "draft_class": rep.draft_class,
        "checked": rep.checked,
        "ok": rep.checked and not rep.errors,
        "values_scanned": rep.values_scanned,
        "note": rep.note,
        "loads": rep.loads,
        "ignored": rep.ignored,
        "renames": rep.renames,
        "problems": [dataclasses.asdict(p) for p in rep.problems],
    }


def describe_draft(path, sglang_version: str | None = None, target=None) -> dict:
    """What `bench` (and people) want to know about a draft, headers only (values_scanned: false): which SGLang
    class builds it, K, the recorded HF indices, EAGLE-3.1 flags, and whether `check` finds it servable. Without
    SGLang installed (a bench client) and no release named: judged for the newest supported release."""
    from ..versions import SUPPORTED_MAX, installed_version

    sglang_version = sglang_version or installed_version() or SUPPORTED_MAX
    rep = check_draft(path, target=target, sglang_version=sglang_version, scan_values=False)
    out = {
        "path": str(path),
        "draft_class": rep.draft_class,
        "release": rep.release,
        "checked": rep.checked,
        "note": rep.note,
        "ok": rep.checked and not rep.errors,
        "values_scanned": False,
        "errors": [str(p) for p in rep.errors],
    }
    if rep.checked:
        from .hub import resolve

        local = resolve(str(path))[0]
        try:
            cfg = read_json_file(local / "config.json", "draft config") if local else {}
        except BadInput:
            cfg = {}  # already among the errors
        spec, _ = rules.spec_from_config(cfg, keys.resolve_layout(sglang_version)) if cfg else (None, [])
        if spec is not None:
            out.update(
                k=spec.k,
                aux_ids=list(spec.aux_ids or []),
                hf_indices=list(spec.hf_indices or []) or None,
                hidden=spec.hidden,
                target_hidden=spec.target_hidden,
                draft_vocab=spec.draft_vocab,
                fc_norm=spec.fc_norm,
                norm_output=bool(cfg.get("norm_output")),
                layout=spec.layout,
            )
    return out
