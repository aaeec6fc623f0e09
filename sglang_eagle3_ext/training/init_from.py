"""`train --init-from DIR`: the draft a run continues from — its weights, its draft-vocab mapping, its layout and
shape — read with the draft package's readers and refused (TrainDraftError naming DIR and the fix) unless the run
can take every one of its tensors.

DIR is in SGLang's serving layout (what `convert` writes: `layers.N.*` or `midlayer.*`, LlamaForCausalLMEagle3 or
the MLA class) or in speculators' format (what `train` writes). Its tensors are read under SGLang's canonical names
(draft/keys.canonical, then the layout's source_key) and checked as `check` checks a draft (draft/rules.py); the
Llama route takes them under speculators' names (the one rename: layers >= 1 call SGLang's hidden_norm
input_layernorm), the MLA route under SGLang's, which are its own.

    resolve_options(opts)        the run's layout and shape settings from DIR; a flag saying otherwise is refused
    read_draft(path, target_cfg) DIR's config and tensor headers, checked (InitDraft)
    speculators_state_dict(init) the Llama route's tensors, d2t/t2d checked against each other
    mla_config / mla_state_dict  the MLA route's config and tensors
    load_into(model, sd, where)  every trainable parameter of the model from sd, every tensor of sd taken
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..boundary import BadInput
from ..draft import convert, keys, rules
from ..draft.errors import DraftError
from ..draft.keys import LAYER, ignored_reason, layout_for_version
from ..draft.safetensors_io import scan_headers
from ..versions import SUPPORTED_MAX
from .data import parse_layer_ids, read_layer_ids_from_metadata
from .distributed import torchrun_env
from .report import TrainDraftError, say
from .target_view import text_config

FIX_SHAPE = (
    "--init-from needs a draft of the same shape: same --num-layers/--intermediate-size/--draft-vocab-size/target"
)
_FIX_DRAFT = "point --init-from at a complete draft (`sglang-eagle3 check DIR` lists what is wrong)"


@dataclasses.dataclass
class InitDraft:
    """DIR as read: its layout (draft/arch name), source format, SGLang-shaped config, rules' spec, and its tensors
    (SGLang canonical name -> safetensors header) and those not loaded (checkpoint key -> why)."""

    path: Path
    layout: str
    fmt: str
    cfg: dict
    spec: object
    infos: dict
    ignored: dict

    @property
    def where(self) -> str:
        return f"--init-from {self.path}"

    @property
    def hf_indices(self) -> list[int] | None:
        return list(self.spec.hf_indices) if self.spec.hf_indices else None

    def tensors(self) -> dict:
        """The values (SGLang canonical names; a pre-fused MLA projection split), each checked: finite, d2t in the
        target's vocabulary."""
        from safetensors import safe_open

        out, problems = {}, []
        for canon, info in sorted(self.infos.items()):
            with safe_open(str(info.file), framework="pt") as f:
                t = f.get_tensor(info.name)
            parts = self.spec.layout_module.split_fused(canon, t, self.spec) if canon in self._fused() else [(canon, t)]
            for key, v in parts:
                if v.is_floating_point() and not bool(v.isfinite().all()):
                    n_bad = int((~v.isfinite()).sum())
                    problems.append(rules.non_finite_problem(key, n_bad, v.numel(), str(info.file)))
                if key == "d2t":
                    problems += rules.d2t_problems(v, self.spec, str(info.file))
                out[key] = v
        _refuse(self.where, problems, _FIX_DRAFT)
        return out

    def _fused(self) -> dict:
        return getattr(self.spec.layout_module, "FUSED", {})


def _refuse(where: str, problems: list, fix: str) -> None:
    bad = [p for p in problems if not getattr(p, "warning", False)]
    if bad:
        shown = "; ".join(str(p) for p in bad[:4]) + (f"; and {len(bad) - 4} more" if len(bad) > 4 else "")
        raise TrainDraftError(f"{where} cannot be continued: {shown}; {fix}")


def _layout():
    """Training reads drafts as the newest supported release names them (what an installed release reads is
    `check`'s business, not the trainer's)."""

    return layout_for_version(SUPPORTED_MAX)


def _config(d: Path, where: str):
    """(SGLang-shaped config, source format, rules' spec) of DIR; TrainDraftError naming the fix."""

    if not d.is_dir():
        raise TrainDraftError(f"{where}: not a folder; point it at a draft's folder (config.json + *.safetensors)")
    if not (d / "config.json").is_file():
        raise TrainDraftError(
            f"{where}: no config.json, so this is no draft's folder; point --init-from at the "
            f"folder `train --out` or `convert` wrote"
        )
    layout = _layout()
    try:
        cfg, fmt, _ = convert.convert_config(convert.source_config(d), layout)
        spec, problems = rules.spec_from_config(cfg, layout, where=str(d / "config.json"))
    except DraftError as e:
        _refuse(where, e.problems, _FIX_DRAFT)
        raise TrainDraftError(f"{where}: {e.header}; {_FIX_DRAFT}") from None
    except BadInput as e:
        raise TrainDraftError(f"{where}: {e}") from None
    _refuse(where, problems, _FIX_DRAFT)
    return cfg, fmt, spec


def _ignorable(canon: str, spec) -> str | None:
    """Why a DIR tensor is not loaded (None: it is): the target's own tensors, which every run takes from the
    target; the input_layernorm SGLang's layers >= 1 hold but never use."""

    if canon in ("d2t", "t2d"):
        return None
    why = ignored_reason(canon, spec.embed_from_target)
    if why is not None:
        return why
    m = LAYER.match(canon)
    if m and int(m.group(1)) >= 1 and m.group(2) == "input_layernorm.weight":
        return "SGLang's draft layers >= 1 do not use input_layernorm"
    return None


def read_draft(path, target_cfg: dict) -> InitDraft:
    """DIR's config and every tensor header, checked against its own config and against the target."""

    d = Path(path)
    where = f"--init-from {d}"
    cfg, fmt, spec = _config(d, where)
    headers, problems = scan_headers(d)
    shapes, arch = rules.expected_shapes(spec), spec.layout_module
    infos, ignored, fused = {}, {}, getattr(spec.layout_module, "FUSED", {})
    for name, info in sorted(headers.items()):
        canon, _ = arch.source_key(keys.canonical(name)[0], fmt)
        why = _ignorable(canon, spec)
        if why is not None:
            ignored[name] = why
            continue
        if canon in infos:
            problems.append(f"{info.file}: {name} duplicates {canon}")
        parts = fused.get(canon)
        if parts:  # pre-fused: the halves SGLang fuses itself must fill it exactly
            want = (sum(shapes[p][0] for p in parts), shapes[parts[0]][1])
            problems += (
                []
                if tuple(info.shape) == want
                else [f"{info.file}: {canon} is {list(info.shape)}, expected {list(want)}"]
            )
        else:
            problems += rules.tensor_problems(canon, tuple(info.shape), spec, shapes, str(info.file))
        infos[canon] = info
    problems += [f"{d}: {c} and its part {p} are both there" for c in infos for p in fused.get(c, ()) if p in infos]
    present = set(infos) | {p for c in infos for p in fused.get(c, ())}
    problems += rules.missing_problems(present, spec, str(d)) if headers else []
    problems += rules.target_problems(spec, target_cfg, f"{d} vs --target")
    _refuse(where, problems, _FIX_DRAFT)
    return InitDraft(path=d, layout=spec.layout, fmt=fmt, cfg=cfg, spec=spec, infos=infos, ignored=ignored)


# --- the run's settings from DIR ----------------------------------------------------------------------------


def _settings(init: InitDraft) -> dict:
    """Option name -> DIR's value: DIR's layout and shape settings (an option left unset, None, takes it), the
    layout's own among them."""
    spec = init.spec
    s = {
        "draft_arch": init.layout,
        "layer_ids": init.hf_indices,
        "intermediate_size": spec.inter,
        "num_layers": spec.n_layers,
        "draft_vocab_size": spec.lm_head_rows,
    }
    return {**s, **spec.layout_module.init_settings(spec, init.cfg)}


def _recipe_problems(init: InitDraft) -> list[str]:
    """What DIR was trained with that its layout's route does not build (it would continue another network)."""
    return init.spec.layout_module.init_problems(init.spec, init.cfg)


def resumed_line(init, out) -> str:
    """What --init-from does when --resume continues the run from its own checkpoint."""
    return f"--resume: the checkpoint in {out} holds the weights; --init-from {init.path} is not loaded again"


def resolve_options(opts):
    """`opts` with the layout and shape settings of DIR (--init-from): each flag left out takes DIR's value (said
    once); a flag given otherwise is refused, as is a DIR whose HF indices are unknown without --layer-ids, or
    whose indices differ from those recorded beside --data."""

    try:
        tcfg = text_config(Path(opts.target))
    except (OSError, ValueError) as e:
        raise TrainDraftError(f"--target {opts.target}: cannot read its config.json ({e})") from None
    init = read_draft(opts.init_from, tcfg)
    bad = _recipe_problems(init)
    if bad:
        raise TrainDraftError(f"{init.where} cannot be continued: {bad[0]}; train afresh without --init-from")
    changes, taken = {}, []
    for name, dir_value in _settings(init).items():
        value = getattr(opts, name)
        value = parse_layer_ids(value) if name == "layer_ids" else value
        if dir_value is None and name == "layer_ids":
            if value is None:
                raise TrainDraftError(
                    f"{init.where} does not record the HF hidden-state indices it was trained on "
                    f"(eagle_config.hf_hidden_state_indices): pass them with --layer-ids"
                )
            continue
        if value is not None and value != dir_value:
            flag = "--" + name.replace("_", "-")
            shown = ",".join(map(str, value)) if isinstance(value, list) else value
            raise TrainDraftError(
                f"{flag} {shown} conflicts with --init-from {init.path} (its {name} is {dir_value}): "
                f"leave {flag} out (it defaults to the draft's) or train afresh without --init-from"
            )
        effective = None if (name == "draft_vocab_size" and dir_value == init.spec.vocab) else dir_value
        if value != effective:
            taken.append(f"{name} {dir_value}")
            changes[name] = effective
    if opts.data is not None and "layer_ids" in changes:
        meta, src = read_layer_ids_from_metadata(Path(opts.data))
        if meta is not None and meta != changes["layer_ids"]:
            raise TrainDraftError(
                f"--data {opts.data} holds the states of HF layers {meta} ({src}) but --init-from "
                f"{init.path} was trained on {changes['layer_ids']}: dump the data at the draft's "
                f"layers (or pass --layer-ids to read the files as the draft's)"
            )
    if taken and _main_process():
        say(f"--init-from {init.path}: {init.layout} draft ({init.fmt} layout); from it: {', '.join(taken)}")
    return dataclasses.replace(opts, **changes)


def _main_process() -> bool:
    """Rank 0 (or no torchrun): the one that prints (this runs before the process group is joined)."""

    try:
        env = torchrun_env()
    except TrainDraftError:
        return True
    return env is None or env[0] == 0


# --- DIR's tensors as each route's model names them ------------------------------------------------------------


def _mapping(sd: dict, init: InitDraft) -> None:
    """d2t/t2d in place: DIR's mapping, with t2d made from d2t when DIR has none; refused when they disagree or
    when d2t is not in ascending target order (speculators' teacher takes the target's lm_head rows in that
    order). A full-vocabulary draft keeps no mapping (an identity one is dropped)."""
    import torch

    spec, where = init.spec, init.where
    d2t, t2d = sd.pop("d2t", None), sd.pop("t2d", None)
    if not spec.needs_d2t:
        if (d2t is not None and bool(d2t.any())) or (t2d is not None and not bool(t2d.bool().all())):
            raise TrainDraftError(
                f"{where} cannot be continued: its d2t/t2d are not the identity, but its "
                f"draft_vocab_size is the target's vocabulary; {_FIX_DRAFT}"
            )
        return
    ids = torch.arange(d2t.numel()) + d2t.long().reshape(-1)
    if d2t.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise TrainDraftError(
            f"{where} cannot be continued: its d2t does not list target tokens in ascending order, "
            f"which speculators' trainer assumes (its teacher takes the target's lm_head rows in "
            f"that order); train afresh without --init-from"
        )
    mask = torch.zeros(spec.vocab, dtype=torch.bool)
    mask[ids] = True
    if t2d is not None and not torch.equal(t2d.bool().reshape(-1), mask):
        raise TrainDraftError(
            f"{where} cannot be continued: its t2d does not mark the target tokens its d2t maps to; {_FIX_DRAFT}"
        )
    sd["d2t"], sd["t2d"] = d2t.long().reshape(-1), mask


def speculators_state_dict(init: InitDraft) -> dict:
    """DIR's tensors under speculators' Eagle3DraftModel names, d2t/t2d as its buffers hold them."""

    sd = {}
    for k, v in init.tensors().items():
        m = LAYER.match(k)
        if m and int(m.group(1)) >= 1 and m.group(2) == "hidden_norm.weight":
            k = f"layers.{m.group(1)}.input_layernorm.weight"
        sd[k] = v
    _mapping(sd, init)
    return sd


def mla_config(init: InitDraft, fresh: dict) -> dict:
    """The MLA draft's config.json: DIR's, completed by what a fresh run writes (`fresh`: mla_draft_config for the
    same target and HF indices, whose eagle_config names the installed release's ids); the head is trained."""
    cfg = {**fresh, **{k: v for k, v in init.cfg.items() if k not in ("eagle_config", "torch_dtype", "dtype")}}
    cfg["eagle_config"] = {**init.cfg.get("eagle_config", {}), **fresh["eagle_config"]}
    cfg["draft_vocab_size"] = cfg.get("draft_vocab_size") or cfg["vocab_size"]
    return cfg


def mla_state_dict(init: InitDraft, model) -> dict:
    """DIR's tensors under the MLA model's names (SGLang's); a DIR without lm_head (SGLang gave it the target's)
    keeps the model's, which is the target's."""
    sd = init.tensors()
    _mapping(sd, init)
    if "lm_head.weight" not in sd and init.spec.draft_vocab is None:
        sd["lm_head.weight"] = model.lm_head.weight.detach().clone()
        say(f"{init.where} has no lm_head (SGLang served it the target's): continuing from the target's")
    return sd


# --- into the model the run built ----------------------------------------------------------------------------


def expected_of(model) -> tuple[dict, set]:
    """(state-dict name -> shape, names of trainable parameters) of a model not yet wrapped."""
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return shapes, {n for n, p in model.named_parameters() if p.requires_grad}


def load_into(model, sd: dict, where, expected: tuple[dict, set] | None = None) -> int:
    """sd into `model` (one process, FSDP or DDP: every rank passes the full sd); returns the tensors loaded.
    Refused unless every trainable parameter of the model is in sd with its shape and every tensor of sd has a
    place in the model (the frozen ones sd lacks keep the target's values)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    shapes, trainable = expected or expected_of(model)
    lines = [
        f"{k} {list(v.shape)} in {where}, the model's is {list(shapes[k])}"
        for k, v in sorted(sd.items())
        if k in shapes and tuple(v.shape) != shapes[k]
    ]
    lines += [f"nothing in the model takes {k} {list(v.shape)}" for k, v in sorted(sd.items()) if k not in shapes]
    lines += [
        f"the model trains {k} {list(shapes[k])}, which {where} does not hold" for k in sorted(trainable - set(sd))
    ]
    if lines:
        shown = "; ".join(lines[:4]) + (f"; and {len(lines) - 4} more" if len(lines) > 4 else "")
        raise TrainDraftError(f"--init-from {where} does not fit the draft this run builds: {shown}; {FIX_SHAPE}")
    set_model_state_dict(model, dict(sd), options=StateDictOptions(full_state_dict=True, strict=False))
    return len(sd)


def continuing_line(init: InitDraft, n: int) -> str:
    """The one line a run says when it starts from DIR's weights."""
    ignored = f"; not loaded: {', '.join(sorted(init.ignored))} (the target's or unused)" if init.ignored else ""
    return (
        f"continuing from {init.path} ({n} tensors, {init.fmt} layout{ignored}; the target's embeddings and "
        f"teacher head come from --target as in any run; this run's epochs and learning-rate schedule start "
        f"afresh)"
    )


def mapping_note(init: InitDraft, d2t, token_freq_path: Path, vocab: int) -> str | None:
    """Said once when the data's own draft vocabulary (speculators' top-N by frequency) differs from DIR's."""
    import torch
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    freq = torch.load(token_freq_path, weights_only=True)
    mine, _ = build_vocab_mappings_from_distribution(freq, d2t.numel(), vocab)
    if torch.equal(mine, d2t):
        return None
    n = d2t.numel()
    kept = set((torch.arange(n) + d2t).tolist())
    other = len(kept - set((torch.arange(n) + mine).tolist()))
    return (
        f"draft vocabulary: the mapping of --init-from {init.path} is kept ({other} of its {n} target tokens "
        f"are not among this data's {n} most frequent): its lm_head rows follow it"
    )


_LAYER_KEYS = (
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "rope_parameters",
    "rope_scaling",
    "max_position_embeddings",
)


def llama_layer_config(init: InitDraft, fresh: dict) -> dict:
    """The Llama draft's layer config: a fresh run's (training/speculators/draft_config.draft_layer_config, with DIR's
    shape) with DIR's attention geometry and numerics (RoPE, norm eps), so the continued network is DIR's."""
    return {**fresh, **{k: init.cfg[k] for k in _LAYER_KEYS if init.cfg.get(k) is not None}}
