"""`python -m sglang_eagle3_ext.convert SRC DST`: an EAGLE-3 draft SGLang loads exactly as trained.

Accepts speculators (`Eagle3Speculator`, `layers.0.*`), SpecForge / SGLang (`LlamaForCausalLMEagle3`,
`midlayer.*` or `layers.N.*`) and EAGLE-repo (`LlamaForCausalLM` + `draft_vocab_size`) checkpoints, and MLA
drafts (Kimi-K2.5's): SGLang's `Eagle3DeepseekV2ForCausalLM` as published and SpecForge's
`DeepseekV3ForCausalLMEagle3` (`midlayer.*`); a pre-fused `fused_qkv_a_proj_with_mqa` is split into the two
halves SGLang fuses itself. `--force` replaces only a previous output of convert, never a dir holding SRC.
Writes key names for the installed (or named) SGLang release, the aux layer ids that release
needs, and the trained HF hidden-state indices (keys.HF_INDICES_FIELD). Refuses anything SGLang
cannot reproduce. Output is written to a temp dir beside DST and renamed into place.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import sys
from pathlib import Path

from ..draft import errors as E
from ..draft import keys, mla, rules
from ..draft.errors import ConversionRefused, Problem
from ..draft.keys import HF_INDICES_FIELD

SPECFORGE_MLA = "DeepseekV3ForCausalLMEagle3"
MLA_FORMATS = ("sglang-mla", "specforge-mla")
_DROP_FROM_LAYER_CFG = {"architectures", "model_type", "transformers_version", "_name_or_path", "auto_map"}


def _refuse(msg: str, code: str = E.UNSUPPORTED_OPTION):
    raise ConversionRefused([Problem(code, msg)], "convert: refusing to write a draft SGLang would not run as trained:")


def detect_format(cfg: dict) -> str:
    archs = cfg.get("architectures") or []
    if cfg.get("speculators_model_type") or "Eagle3Speculator" in archs or "transformer_layer_config" in cfg:
        if cfg.get("speculators_model_type", "eagle3") != "eagle3":
            _refuse(f"speculators model type {cfg.get('speculators_model_type')!r} is not EAGLE-3", E.CONFIG_INVALID)
        return "speculators"
    if rules.ARCH in archs:
        return "sglang"   # SGLang / SpecForge
    if mla.ARCH in archs:
        return "sglang-mla"     # Kimi-K2.5's published MLA drafts (SGLang's class)
    if SPECFORGE_MLA in archs:
        return "specforge-mla"  # SpecForge's MLA draft: its own class name, `midlayer.*`, fc over 3 aux states
    if "LlamaForCausalLM" in archs and "draft_vocab_size" in cfg:
        return "eagle"    # SafeAILab EAGLE repo
    _refuse(f"unrecognised draft config (architectures={archs}); expected speculators Eagle3Speculator, "
            f"{rules.ARCH} (SGLang/SpecForge), {mla.ARCH} (MLA, Kimi-K2.5), {SPECFORGE_MLA} (SpecForge MLA) "
            f"or an EAGLE-repo LlamaForCausalLM with draft_vocab_size", E.CONFIG_INVALID)


def _from_speculators(cfg: dict, hf_override) -> tuple[dict, list[int] | None, bool]:
    tl = dict(cfg["transformer_layer_config"])
    if tl.get("model_type", "llama") != "llama":
        _refuse(f"transformer_layer_config.model_type={tl.get('model_type')!r}: SGLang's EAGLE-3 draft is Llama-only "
                f"(e.g. Qwen3 layers have qk-norm it lacks); retrain with a llama layer config")
    if cfg.get("norm_before_residual"):
        _refuse("norm_before_residual=true: SGLang always uses the un-normed residual, so the draft would run a "
                "different network than it was trained as; retrain with norm_before_residual=false")
    out = {k: v for k, v in tl.items() if k not in _DROP_FROM_LAYER_CFG}
    hidden = tl["hidden_size"]
    out.update(architectures=[rules.ARCH], model_type="llama", tie_word_embeddings=False,
               draft_vocab_size=cfg.get("draft_vocab_size"),
               target_hidden_size=cfg.get("target_hidden_size") or hidden)
    # speculators' ids already mean HF hidden_states[k] (no +1)
    hf = hf_override or cfg.get("eagle_aux_hidden_state_layer_ids")
    if not hf:
        _refuse("the speculators config has no eagle_aux_hidden_state_layer_ids (it was resolved from the verifier at "
                "training time); pass --hf-indices with the HF hidden_states indices used in training", E.CONFIG_MISSING)
    for flag in ("fc_norm", "norm_output"):
        if cfg.get(flag):
            out[flag] = True
    out["eagle_config"] = {"norm_before_fc": True} if cfg.get("norm_before_fc") else {}
    out["num_aux_hidden_states"] = len(hf)
    return out, list(hf), True


def convert_config(cfg: dict, layout: keys.Layout, hf_override=None) -> tuple[dict, str, list[str]]:
    """(SGLang config, source format, warnings)."""
    fmt = detect_format(cfg)
    warnings = []
    if fmt == "speculators":
        out, hf, _ = _from_speculators(cfg, hf_override)
    else:
        out = {k: v for k, v in cfg.items() if k not in ("transformers_version", "_name_or_path")}
        out["architectures"] = [mla.ARCH] if fmt in MLA_FORMATS else [rules.ARCH]
        if fmt in MLA_FORMATS:
            out.setdefault("model_type", "deepseek_v3")  # SGLang reads the config through AutoConfig
        out.setdefault("target_hidden_size", cfg.get("hidden_size"))
        ec = dict(cfg.get("eagle_config") or {})
        if ec.get("norm_before_residual") or cfg.get("norm_before_residual"):
            _refuse("norm_before_residual=true: SGLang always uses the un-normed residual; retrain without it")
        hf = hf_override or ec.get(HF_INDICES_FIELD)
        if not hf and not ec.get("eagle_aux_hidden_state_layer_ids"):
            # which layers an EAGLE/SpecForge draft saw depends on the engine that dumped them: do not guess
            _refuse(f"{fmt} checkpoint does not record its target layers; pass --hf-indices (HF hidden_states "
                    f"indices used in training, e.g. 3,31,59 for a 61-layer target)", E.CONFIG_MISSING)
        out["eagle_config"] = ec
        if not hf:
            warnings.append(f"no {HF_INDICES_FIELD} recorded (source is {fmt}); SGLang's own +1 rule will decide the "
                            f"captured layers from eagle_aux_hidden_state_layer_ids={ec['eagle_aux_hidden_state_layer_ids']}")
    ec = out["eagle_config"]
    ec["use_aux_hidden_state"] = True
    if hf:
        ids, warn = keys.release_aux_ids(hf, layout)
        if warn:
            warnings.append(warn)
        ec["eagle_aux_hidden_state_layer_ids"] = ids
        ec[HF_INDICES_FIELD] = list(hf)
        if "num_aux_hidden_states" in out:
            out["num_aux_hidden_states"] = len(hf)
    if layout.midlayer or fmt in MLA_FORMATS:  # the MLA class ignores it: K = len(layer ids)
        out.pop("num_aux_hidden_states", None)
    return out, fmt, warnings


def _source_config(src: Path) -> dict:
    """The source's config.json, its keys that convert reads checked for type (ConversionRefused / BadInput:
    exit 2, naming the file and key) before anything reads them."""
    from ..boundary import field, read_json_file
    from ..draft.config_schema import type_problems

    where = str(src / "config.json")
    cfg = read_json_file(src / "config.json", "draft config")
    field(cfg, "speculators_model_type", str, where, optional=True)
    archs = cfg.get("architectures")
    problems = type_problems(cfg, where, mla=isinstance(archs, list) and mla.ARCH in archs)
    if not problems and (cfg.get("speculators_model_type") or "transformer_layer_config" in cfg):
        tl = field(cfg, "transformer_layer_config", dict, where)
        field(tl, "hidden_size", int, f"{where}: transformer_layer_config", minimum=1)
        problems = type_problems(tl, f"{where}: transformer_layer_config")
    if problems:
        raise ConversionRefused(problems, f"convert: {where} is not a draft config convert can read:")
    return cfg


def _safe_dtypes() -> set:
    import torch

    from ..draft.safetensors_io import DTYPE_BYTES

    names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
             "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
             "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64"}
    return {getattr(torch, names[k]) for k in DTYPE_BYTES if hasattr(torch, names[k])}


def _read_pickle(f: Path) -> dict:
    """A .bin/.pt state dict through torch.load(weights_only=True) (no code runs), checked to be a flat mapping
    name -> dense tensor that safetensors can store. Anything else is bad input naming the file."""
    import torch

    from ..boundary import BadInput, regular_file

    regular_file(f, "pickle checkpoint")
    try:
        sd = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the unpickler makes of outside bytes is bad input, not a bug
        raise BadInput(str(f), f"not a readable torch checkpoint ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(sd, dict):
        raise BadInput(str(f), f"holds a {type(sd).__name__}; expected a state dict (mapping name -> tensor)")
    safe, out, storages = _safe_dtypes(), {}, set()
    for k, v in sd.items():
        if not isinstance(k, str):
            raise BadInput(str(f), f"key {k!r} is not a string; expected a state dict (mapping name -> tensor)")
        if not isinstance(v, torch.Tensor):
            raise BadInput(f"{f}: {k!r}", f"holds a {type(v).__name__}, not a tensor (a training checkpoint? save the "
                                          f"model's state_dict())")
        if v.layout != torch.strided or v.dtype not in safe:
            raise BadInput(f"{f}: {k!r}", f"is a {v.dtype} {v.layout} tensor; safetensors stores dense tensors of "
                                          f"{', '.join(sorted(str(d).replace('torch.', '') for d in safe))}")
        v = v.detach()
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if v.numel() and ptr in storages else v  # tied weights: safetensors refuses shared storage
        storages.add(ptr)
    return out


def _iter_source(src: Path, allow_pickle: bool):
    from safetensors import safe_open

    from ..draft.safetensors_io import PICKLE_SUFFIXES, scan_headers, weight_files

    files, problems = weight_files(src)
    if problems and problems[0].code == E.PICKLE_ONLY and allow_pickle:
        for f in sorted(p for p in src.iterdir() if p.suffix in PICKLE_SUFFIXES):
            for k, v in _read_pickle(f).items():
                yield f.name.rsplit(".", 1)[0] + ".safetensors", k, v
        return
    _, hp = scan_headers(src)
    if problems or hp:
        raise ConversionRefused(problems + hp, f"convert: cannot read {src}:")
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                yield f.name, k, h.get_tensor(k)


_OUR_FILES = ("config.json", "model.safetensors.index.json")


def _check_destination(src: Path, dst: Path, force: bool) -> dict:
    """Never write into, around or through the source, nor over anything that is not a previous output of
    convert (--force replaces only that): outdir.py's rule, checked before anything is read. Returns the
    rule for outdir.writing. Refusals stay SystemExit (one line, exit 2), as convert always raised them."""
    from ..files import outdir

    def legacy(d: Path) -> bool:   # outputs written before outdir.MARKER: our file names, our weights
        entries = list(d.iterdir())
        foreign = [e for e in entries if not (e.is_file() and (e.name in _OUR_FILES or e.suffix == ".safetensors"))]
        return not foreign and (d / "config.json").is_file() and \
            all(_converted_by_us(e) for e in entries if e.suffix == ".safetensors")

    rule = dict(tool="convert", flag="DST", inputs=[("source draft", src)], replace=force, legacy=legacy)
    try:
        outdir.check(dst, **rule)
    except outdir.OutputDirRefused as e:
        raise SystemExit(str(e)) from None
    return rule


def _converted_by_us(path: Path) -> bool:
    import struct

    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            meta = json.loads(f.read(min(n, 1 << 26))).get("__metadata__") or {}
    except (OSError, ValueError, struct.error, AttributeError):
        return False
    return meta.get("converted_by") == "sglang_eagle3_ext"


def convert(src, dst, sglang_version: str | None = None, hf_indices=None, force: bool = False,
            allow_pickle: bool = False, progress: bool = True, log=print, report: dict | None = None) -> Path:
    """Write DST; `report` (when given) receives what was done, for --json."""
    import torch
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    _check_destination(src, dst, force)
    layout = keys.resolve_layout(sglang_version)
    cfg = _source_config(src)
    out_cfg, fmt, warnings = convert_config(cfg, layout, hf_indices)
    spec, problems = rules.spec_from_config(out_cfg, layout, where=f"{dst}/config.json")
    fatal = [p for p in problems if not p.warning]
    if spec is None or fatal:
        raise ConversionRefused(problems, "convert: the converted config would not serve correctly:")
    warnings += [p.message for p in problems if p.warning]
    shapes = rules.expected_shapes(spec)

    from ..draft.progress import ByteProgress
    from ..draft.safetensors_io import file_size_mb
    prog = ByteProgress("convert", int(file_size_mb([p for p in src.iterdir() if p.is_file()]) * 2**20), progress)
    shards: dict[str, dict] = {}
    present, renames, dropped = set(), {}, []
    for fname, name, t in _iter_source(src, allow_pickle):
        prog.add(t.numel() * t.element_size())
        canon, notes = keys.canonical(name)
        if spec.mla and canon == mla.FUSED:  # pre-fused: SGLang would drop it; write the two halves it fuses
            for half, part in zip((mla.Q_HALF, mla.KV_HALF), mla.split_fused(t, spec)):
                problems += rules.tensor_problems(half, tuple(part.shape), spec, shapes, f"{src}/{fname}")
                present.add(half)
                shards.setdefault(fname, {})[half] = part.contiguous()
            renames[f"{mla.FUSED} -> q_a_proj + kv_a_proj_with_mqa"] = 1
            continue
        if fmt == "speculators" and canon.startswith("layers.") and not canon.startswith("layers.0.") \
                and canon.endswith(".input_layernorm.weight"):
            # speculators layers >= 1 are plain decoder layers; SGLang's use hidden_norm in that role
            canon = canon.replace(".input_layernorm.", ".hidden_norm.")
            notes.append("layers.N.input_layernorm -> layers.N.hidden_norm (N>=1)")
        for n in notes:
            renames[n] = renames.get(n, 0) + 1
        why = keys.ignored_reason(canon, spec.embed_from_target)
        if why is not None and canon != "t2d":
            dropped.append(f"{canon} ({why})")
            continue
        problems += rules.tensor_problems(canon, tuple(t.shape), spec, shapes, f"{src}/{fname}")
        target, refused = keys.to_release(canon, layout, mla=spec.mla)
        if refused:
            problems.append(refused)
            continue
        # the sum is a fast screen (NaN/Inf propagate); a finite tensor whose sum overflows is counted exactly
        if t.is_floating_point() and not torch.isfinite(t.sum(dtype=torch.float32)):
            n_bad = int((~torch.isfinite(t)).sum())
            if n_bad:
                problems.append(rules.non_finite_problem(canon, n_bad, t.numel(), f"{src}/{fname}"))
        if canon == "d2t":
            problems += rules.d2t_problems(t, spec, f"{src}/{fname}")
        present.add(canon)
        shards.setdefault(fname, {})[target] = t.contiguous()
    prog.close()
    if rules.HEAD in present and rules.head_from_target(spec):
        warnings.append(rules.keep_trained_head(out_cfg, spec))  # else SGLang swaps in the target's head
        spec, _ = rules.spec_from_config(out_cfg, layout, where=f"{dst}/config.json")
    # SGLang's --dtype auto takes the draft's dtype from its config (none/float32 -> float16): record the
    # weights' own dtype, or a bf16 target meets a float16 draft at the first request.
    float_dtypes = collections.Counter(str(t.dtype).replace("torch.", "") for ts in shards.values()
                                       for t in ts.values() if t.is_floating_point())
    if float_dtypes:
        wdt = float_dtypes.most_common(1)[0][0]
        if out_cfg.get("torch_dtype") not in (None, wdt):
            warnings.append(f"config torch_dtype={out_cfg['torch_dtype']!r} but the weights are {wdt}: recorded {wdt}")
        out_cfg["torch_dtype"] = out_cfg["dtype"] = wdt
    problems += rules.missing_problems(present, spec, str(src))
    fatal = [p for p in problems if not p.warning]
    if fatal:
        raise ConversionRefused(fatal, f"convert: {src} cannot become a faithful SGLang {layout.release} draft:")

    from ..files import outdir

    with outdir.writing(dst, **_check_destination(src, dst, force), record={"source": str(src)}) as tmp:
        names = {f: ("model.safetensors" if len(shards) == 1 else f) for f in shards}
        for f, tensors in shards.items():
            save_file(tensors, str(tmp / names[f]), metadata={"format": "pt", "converted_by": "sglang_eagle3_ext"})
        if len(shards) > 1:
            wm = {k: names[f] for f, ts in shards.items() for k in ts}
            (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}, indent=2))
        (tmp / "config.json").write_text(json.dumps(out_cfg, indent=2, sort_keys=True) + "\n")
    log(f"converted {fmt} draft {src} -> {dst} for SGLang {layout.release}: {len(present)} tensors; "
        f"renames: {keys.summarize_renames(renames)}; dropped: {', '.join(dropped) or 'none'}; "
        f"aux ids {out_cfg['eagle_config'].get('eagle_aux_hidden_state_layer_ids')}, "
        f"HF indices {out_cfg['eagle_config'].get(HF_INDICES_FIELD)}")
    for w in warnings:
        log(f"warning: {w}")
    if report is not None:
        report.update(src=str(src), dst=str(dst), format=fmt, release=layout.release, tensors=len(present),
                      renames=dict(renames), dropped=list(dropped), warnings=list(warnings),
                      aux_ids=out_cfg["eagle_config"].get("eagle_aux_hidden_state_layer_ids"),
                      hf_indices=out_cfg["eagle_config"].get(HF_INDICES_FIELD))
    return dst


def _int_list(s: str) -> list[int]:
    import argparse

    try:
        return [int(x) for x in s.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 3,31,59, got {s!r}") from None


def build_parser():
    from . import common as cli_common

    ap = cli_common.parser("convert", cli_common.doc_description(__doc__))
    ap.add_argument("src", help="the draft to convert (speculators / SpecForge / EAGLE checkpoint folder)")
    ap.add_argument("dst", help="output folder (must be empty or absent, or --force)")
    cli_common.add_sglang_release(ap, "target SGLang release")
    ap.add_argument("--hf-indices", type=_int_list, help="HF hidden_states indices the draft was trained on, e.g. 3,31,59")
    ap.add_argument("--force", action="store_true", help="replace a non-empty DST")
    ap.add_argument("--allow-pickle", action="store_true", help="read .bin/.pt sources (torch.load weights_only=True)")
    cli_common.add_json_out(ap, "what was converted (or the problems refusing it)")
    cli_common.add_verbosity(ap, quiet="no progress bar")
    return cli_common.finish(ap, "convert")


def main(argv=None) -> int:
    from . import common as cli_common

    a = build_parser().parse_args(argv)
    report: dict = {}
    say = (lambda msg: print(msg, file=sys.stderr)) if a.json == "-" else print   # stdout: the JSON only
    from .output import library_output

    try:
        with library_output(a.verbose):
            convert(a.src, a.dst, a.sglang_version, a.hf_indices, a.force, a.allow_pickle, progress=not a.quiet,
                    log=say, report=report)
    except E.DraftError as e:
        head, *problems = str(e).splitlines()
        print(cli_common.error_line("convert", head.removeprefix("convert: ")), *problems, sep="\n", file=sys.stderr)
        if a.json:
            cli_common.write_json(a.json, {"ok": False, "src": a.src, "dst": a.dst, "refused": head,
                                           "problems": [dataclasses.asdict(p) for p in e.problems]})
        return cli_common.EXIT_BAD_INPUT
    if a.json:
        cli_common.write_json(a.json, {"ok": True, **report})
    return cli_common.EXIT_OK


if __name__ == "__main__":
    from .common import run_tool

    sys.exit(run_tool("convert", main))
