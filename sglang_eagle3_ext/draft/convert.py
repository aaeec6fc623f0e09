"""Convert an EAGLE-3 draft into one SGLang loads exactly as trained (what `convert SRC DST` runs).

Reads the source formats the draft layouts name (draft/arch: each layout's SOURCE_NAMES and READERS), writes
key names for the named (or installed) SGLang release, the aux layer ids that release needs and the trained HF
hidden-state indices (keys.HF_INDICES_FIELD); a pre-fused parameter the release fuses itself is split into its
parts. Refuses (ConversionRefused) anything SGLang cannot reproduce. Files in and out: convert_io.py.

    convert(src, dst, sglang_version=None, hf_indices=None, force=False, allow_pickle=False, log=print) -> dst
    convert_config(cfg, release, hf_override=None) -> (SGLang config, source format, warnings)
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

from ..boundary import field, read_json_file
from . import arch as layouts
from . import errors as E
from . import keys, rules
from .config_schema import type_problems
from .convert_io import destination_rule, iter_source, write_draft
from .errors import ConversionRefused, Problem
from .keys import HF_INDICES_FIELD
from .progress import ByteProgress
from .safetensors_io import file_size_mb


def detect_format(cfg: dict):
    """(source format name, the layout module that reads it); ConversionRefused when no layout reads it."""
    for arch in layouts.modules():
        fmt = arch.source_format(cfg)
        if fmt is not None:
            return fmt, arch
    names = [n for arch in layouts.modules() for n in arch.SOURCE_NAMES]
    kind = f"speculators_model_type={cfg['speculators_model_type']!r}, " if cfg.get("speculators_model_type") else ""
    raise E.conversion_refused(
        f"unrecognised draft config ({kind}architectures={cfg.get('architectures') or []}); "
        f"expected {', '.join(names[:-1])} or {names[-1]}",
        E.CONFIG_INVALID,
    )


def _sglang_shaped(cfg: dict, fmt: str, arch, hf_override, warnings: list[str]) -> tuple[dict, list | None]:
    """A config already in SGLang's shape (SGLang, SpecForge, EAGLE repo), under the layout's class."""
    out = {k: v for k, v in cfg.items() if k not in ("transformers_version", "_name_or_path")}
    out["architectures"] = [arch.ARCH]
    for k, v in arch.CONFIG_DEFAULTS.items():
        out.setdefault(k, v)
    out.setdefault("target_hidden_size", cfg.get("hidden_size"))
    ec = dict(cfg.get("eagle_config") or {})
    if ec.get("norm_before_residual") or cfg.get("norm_before_residual"):
        raise E.conversion_refused(
            "norm_before_residual=true: SGLang always uses the un-normed residual; retrain without it"
        )
    hf = hf_override or ec.get(HF_INDICES_FIELD)
    if not hf and not ec.get("eagle_aux_hidden_state_layer_ids"):
        # which layers an EAGLE/SpecForge draft saw depends on the engine that dumped them: do not guess
        raise E.conversion_refused(
            f"{fmt} checkpoint does not record its target layers; pass --hf-indices (HF "
            f"hidden_states indices used in training, e.g. 3,31,59 for a 61-layer target)",
            E.CONFIG_MISSING,
        )
    out["eagle_config"] = ec
    if not hf:
        warnings.append(
            f"no {HF_INDICES_FIELD} recorded (source is {fmt}); SGLang's own +1 rule will decide the "
            f"captured layers from eagle_aux_hidden_state_layer_ids={ec['eagle_aux_hidden_state_layer_ids']}"
        )
    return out, hf


def convert_config(cfg: dict, layout: keys.Layout, hf_override=None) -> tuple[dict, str, list[str]]:
    """(SGLang config, source format, warnings)."""
    fmt, arch = detect_format(cfg)
    warnings: list[str] = []
    reader = arch.READERS.get(fmt)
    out, hf = reader(cfg, hf_override) if reader else _sglang_shaped(cfg, fmt, arch, hf_override, warnings)
    warnings += arch.record_layers(out, hf, layout)
    return out, fmt, warnings


def source_config(src: Path) -> dict:
    """The source's config.json, its keys that convert reads checked for type (ConversionRefused / BadInput:
    exit 2, naming the file and key) before anything reads them."""

    where = str(src / "config.json")
    cfg = read_json_file(src / "config.json", "draft config")
    field(cfg, "speculators_model_type", str, where, optional=True)
    arch = layouts.find(cfg)
    problems = type_problems(cfg, where, arch.CONFIG_FIELDS if arch else ())
    if not problems and (cfg.get("speculators_model_type") or "transformer_layer_config" in cfg):
        tl = field(cfg, "transformer_layer_config", dict, where)
        field(tl, "hidden_size", int, f"{where}: transformer_layer_config", minimum=1)
        problems = type_problems(tl, f"{where}: transformer_layer_config")
    if problems:
        raise ConversionRefused(problems, f"convert: {where} is not a draft config convert can read:")
    return cfg


@dataclasses.dataclass
class _Read:
    """What reading the source gave: tensors per output file, canonical keys written, notes, problems."""

    problems: list[Problem]
    shards: dict[str, dict] = dataclasses.field(default_factory=dict)
    present: set[str] = dataclasses.field(default_factory=set)
    renames: dict[str, int] = dataclasses.field(default_factory=dict)
    dropped: list[str] = dataclasses.field(default_factory=list)


def _value_problems(canon: str, t, spec, where: str) -> list[Problem]:
    import torch

    P = []
    # the sum is a fast screen (NaN/Inf propagate); a finite tensor whose sum overflows is counted exactly
    if t.is_floating_point() and not torch.isfinite(t.sum(dtype=torch.float32)):
        n_bad = int((~torch.isfinite(t)).sum())
        if n_bad:
            P.append(rules.non_finite_problem(canon, n_bad, t.numel(), where))
    if canon == "d2t":
        P += rules.d2t_problems(t, spec, where)
    return P


def _take(r: _Read, fname: str, name: str, t, spec, shapes: dict, fmt: str, layout, where: str) -> None:
    """One source tensor: checked, renamed for the release and kept, or dropped with the reason."""
    arch = spec.layout_module
    canon, notes = keys.canonical(name)
    if canon in arch.FUSED:  # pre-fused: SGLang would drop it; write the parts it fuses itself
        parts = arch.split_fused(canon, t, spec)
        for key, part in parts:
            r.problems += rules.tensor_problems(key, tuple(part.shape), spec, shapes, where)
            r.present.add(key)
            r.shards.setdefault(fname, {})[key] = part.contiguous()
        r.renames[f"{canon} -> " + " + ".join(key.split(".")[-2] for key, _ in parts)] = 1
        return
    canon, note = arch.source_key(canon, fmt)
    for n in notes + ([note] if note else []):
        r.renames[n] = r.renames.get(n, 0) + 1
    why = keys.ignored_reason(canon, spec.embed_from_target)
    if why is not None and canon != "t2d":
        r.dropped.append(f"{canon} ({why})")
        return
    r.problems += rules.tensor_problems(canon, tuple(t.shape), spec, shapes, where)
    target, refused = arch.to_release(canon, layout)
    if refused:
        r.problems.append(refused)
        return
    r.problems += _value_problems(canon, t, spec, where)
    r.present.add(canon)
    r.shards.setdefault(fname, {})[target] = t.contiguous()


def _read(src: Path, allow_pickle: bool, spec, fmt: str, layout, problems: list[Problem], progress: bool) -> _Read:

    shapes = rules.expected_shapes(spec)
    prog = ByteProgress("convert", int(file_size_mb([p for p in src.iterdir() if p.is_file()]) * 2**20), progress)
    r = _Read(problems=list(problems))
    for fname, name, t in iter_source(src, allow_pickle):
        prog.add(t.numel() * t.element_size())
        _take(r, fname, name, t, spec, shapes, fmt, layout, f"{src}/{fname}")
    prog.close()
    return r


def _record_dtype(cfg: dict, shards: dict, warnings: list[str]) -> None:
    """SGLang's --dtype auto takes the draft's dtype from its config (none/float32 -> float16): record the
    weights' own dtype, or a bf16 target meets a float16 draft at the first request."""
    float_dtypes = collections.Counter(
        str(t.dtype).replace("torch.", "") for ts in shards.values() for t in ts.values() if t.is_floating_point()
    )
    if float_dtypes:
        wdt = float_dtypes.most_common(1)[0][0]
        if cfg.get("torch_dtype") not in (None, wdt):
            warnings.append(f"config torch_dtype={cfg['torch_dtype']!r} but the weights are {wdt}: recorded {wdt}")
        cfg["torch_dtype"] = cfg["dtype"] = wdt


def _summary(src, dst, fmt: str, layout, r: _Read, spec, warnings: list[str], log, report) -> None:
    ids, hf = (list(v) if v else None for v in (spec.aux_ids, spec.hf_indices))
    log(
        f"converted {fmt} draft {src} -> {dst} for SGLang {layout.release}: {len(r.present)} tensors; "
        f"renames: {keys.summarize_renames(r.renames)}; dropped: {', '.join(r.dropped) or 'none'}; "
        f"aux ids {ids}, HF indices {hf}"
    )
    for w in warnings:
        log(f"warning: {w}")
    if report is not None:
        report.update(
            src=str(src),
            dst=str(dst),
            format=fmt,
            release=layout.release,
            tensors=len(r.present),
            renames=dict(r.renames),
            dropped=list(r.dropped),
            warnings=list(warnings),
            aux_ids=ids,
            hf_indices=hf,
        )


def convert(
    src,
    dst,
    sglang_version: str | None = None,
    hf_indices=None,
    force: bool = False,
    allow_pickle: bool = False,
    progress: bool = True,
    log=print,
    report: dict | None = None,
) -> Path:
    """Write DST; `report` (when given) receives what was done, for --json. Refusals: ConversionRefused (the
    draft), BadInput (a file, the release, or DST: outdir.OutputDirRefused)."""
    src, dst = Path(src), Path(dst)
    destination_rule(src, dst, force)
    layout = keys.resolve_layout(sglang_version)
    out_cfg, fmt, warnings = convert_config(source_config(src), layout, hf_indices)
    spec, problems = rules.spec_from_config(out_cfg, layout, where=f"{dst}/config.json")
    if spec is None or any(not p.warning for p in problems):
        raise ConversionRefused(problems, "convert: the converted config would not serve correctly:")
    warnings += [p.message for p in problems if p.warning]
    r = _read(src, allow_pickle, spec, fmt, layout, problems, progress)
    if rules.HEAD in r.present and rules.head_from_target(spec):
        warnings.append(rules.keep_trained_head(out_cfg, spec))  # else SGLang swaps in the target's head
        spec, _ = rules.spec_from_config(out_cfg, layout, where=f"{dst}/config.json")
    _record_dtype(out_cfg, r.shards, warnings)
    fatal = [p for p in r.problems + rules.missing_problems(r.present, spec, str(src)) if not p.warning]
    if fatal:
        raise ConversionRefused(fatal, f"convert: {src} cannot become a faithful SGLang {layout.release} draft:")
    write_draft(src, dst, force, r.shards, out_cfg)
    _summary(src, dst, fmt, layout, r, spec, warnings, log, report)
    return dst
