"""A draft (SGLang layout) loaded the way an EAGLE-3 server ends up running it, as a module the simulator drives.

- The same verdict as `check` first (its rules on config, headers, shapes, d2t and the target): a draft SGLang
  would refuse or mis-load is refused here, naming `sglang-eagle3 check`. A speculators-format draft is refused
  naming `sglang-eagle3 convert`.
- Weights through the package's safetensors reader (draft/safetensors_io.py) under their canonical names
  (draft/keys.py); the module is the layout's network (draft/arch/<layout>/net.py: its SGLang-equal twin, held to
  SGLang's class by tests/sglang_cpu/test_mla_draft_equiv.py and test_acceptance_equiv.py).
- What the EAGLE worker changes after loading, done here too: the embeddings become the target's when
  target_hidden_size == hidden_size (set_embed), the lm_head the target's when draft_vocab_size is null and
  untied (set_embed_and_head), a tied head reads the embeddings; d2t becomes hot_token_id = d2t + arange. A
  layout holding no vocabulary (DFlash) drafts with the target's embeddings and lm_head.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from ..boundary import BadInput, Refused, read_json_file
from ..draft import arch as layouts
from ..draft import keys, rules
from ..draft.check import check_draft
from ..draft.keys import LAYER
from ..draft.safetensors_io import FLOAT_DTYPES, INT_DTYPES, read_array, scan_headers
from ..server.runtime import language_config
from ..training.target_view import EMBED, HEAD, read_tensors
from ..versions import SUPPORTED_MAX

log = logging.getLogger("sglang_eagle3_ext.acceptance")
SPECULATORS_HINT = "sglang-eagle3 convert DRAFT OUT, then eval --draft OUT"


@dataclasses.dataclass
class LoadedDraft:
    model: object  # torch module: the layout's network (its net.py)
    hot: object  # torch [draft_vocab] target ids of the draft vocab, or None (same vocab)
    spec: object  # draft.rules.DraftSpec
    cfg: dict
    hf_indices: list | None  # HF hidden_states indices a server feeds it
    hf_from: str
    notes: list

    @property
    def max_len(self) -> int | None:
        """The longest sequence the module runs (its RoPE table's length), or None: any."""
        return getattr(self.model, "max_positions", None)


def read_config(draft: Path) -> dict:
    if not draft.is_dir():
        raise Refused(f"--draft {draft}: no such directory (the draft's folder: config.json + *.safetensors)")
    cfg = read_json_file(draft / "config.json", "draft config")
    if cfg.get("speculators_model_type") or "transformer_layer_config" in cfg:
        raise Refused(
            f"--draft {draft}: a speculators-format draft; eval runs the layout SGLang serves: {SPECULATORS_HINT}"
        )
    return cfg


def _check(draft: Path, target: Path | None) -> None:
    """`check`'s verdict, headers only (the values are read below and checked finite there)."""
    from ..versions import SUPPORTED_MAX, installed_version

    rep = check_draft(draft, target, installed_version() or SUPPORTED_MAX, scan_values=False)
    if rep.errors:
        more = f" (+{len(rep.errors) - 1} more)" if len(rep.errors) > 1 else ""
        raise Refused(
            f"--draft {draft}: SGLang would not serve it as is: {rep.errors[0]}{more}; "
            f"`sglang-eagle3 check {draft}{f' --target {target}' if target else ''}` lists every problem"
        )


def served_hf_indices(cfg: dict, spec, n_target_layers: int | None, release=None) -> tuple[list | None, str]:
    """The HF hidden_states indices a server captures for this draft (with this package active): its layout's
    fed_layers rule (draft/arch) under the release's capture rule; None where the target's layer count is needed
    and unknown."""

    return spec.layout_module.fed_layers(cfg, spec, n_target_layers, release or _release())


def _tensors(draft: Path) -> dict:
    """{canonical name: torch tensor} of every weight file, through the package's safetensors reader."""
    import numpy as np
    import torch

    infos, problems = scan_headers(draft)
    if problems:
        raise Refused(f"--draft {draft}: {problems[0]}")
    out = {}
    for name, info in infos.items():
        if info.dtype not in FLOAT_DTYPES | INT_DTYPES | {"BOOL"}:  # speculators' t2d is a bool mask
            raise Refused(f"--draft {draft}: {name} is {info.dtype}; eval reads float, integer and bool tensors only")
        arr = np.array(read_array(info)).reshape(info.shape)
        out[keys.canonical(name)[0]] = torch.from_numpy(arr)
    return out


def _target_tensors(target: Path | None, need: tuple, why: str) -> dict:
    if not need:
        return {}
    if target is None:
        raise Refused(
            f"the draft is served with the target's {why}: pass --target DIR (the target model's folder; "
            f"also read from the data's metadata when it names a local folder)"
        )

    try:
        return read_tensors(target, need)
    except (OSError, ValueError) as e:
        raise Refused(f"--target {target}: {e}") from None


def _module(spec, cfg: dict):
    """The layout's SGLang-equal module (its net role, draft/arch/<layout>/net.py)."""

    return layouts.net(spec.layout_module)(cfg)


def _unused(canon: str, built) -> bool:
    """A tensor SGLang loads into a parameter its forward never reads: an EAGLE-3 later layer's input_layernorm,
    which the module eval builds (`built`: its state-dict names) then has no parameter for."""

    m = LAYER.match(canon)
    return bool(m) and m.group(1) != "0" and m.group(2) == "input_layernorm.weight" and canon not in built


def _state_dict(spec, tensors: dict, target: Path | None, notes: list, built) -> tuple[dict, object]:
    """The module's weights after the worker's swaps, and hot_token_id (or None)."""
    import torch

    sd = {
        k: v
        for k, v in tensors.items()
        if keys.ignored_reason(k, False) is None and k != "d2t" and not _unused(k, built)
    }
    need = ()
    if spec.embed_from_target:
        if target is None and "embed_tokens.weight" in sd:
            notes.append(
                "no target given: the draft's own embed_tokens stand in for the target's, which a server "
                "installs (identical when the draft was trained with them frozen, as speculators does)"
            )
        else:
            need += (EMBED,)
    if rules.head_from_target(spec) or not spec.layout_module.HOLDS_VOCAB:  # a class without one drafts with it
        need += (HEAD,)
    tt = _target_tensors(target, need, "embeddings" if need == (EMBED,) else "embeddings and lm_head")
    if EMBED in tt:
        sd["embed_tokens.weight"] = tt[EMBED]
    if HEAD in tt:
        sd["lm_head.weight"] = tt[HEAD]
    if spec.tie:
        sd["lm_head.weight"] = sd.get("embed_tokens.weight")
    d2t = tensors.get("d2t")
    hot = (d2t.long() + torch.arange(d2t.shape[0])) if d2t is not None else None
    return sd, hot


def served_spec(draft, target=None):
    """(config, DraftSpec) of a draft SGLang would serve as is, from its config and tensor headers only (no
    weight read); Refused naming the fix otherwise."""

    draft, target = Path(draft), (Path(target) if target else None)
    cfg = read_config(draft)
    _check(draft, target)
    spec, _ = rules.spec_from_config(cfg, _release())
    return cfg, spec


def load(draft, target=None, device="cpu", dtype=None) -> LoadedDraft:
    """The draft as served, on `device` in `dtype`; Refused naming the fix when it cannot be."""
    import torch

    draft, target = Path(draft), (Path(target) if target else None)
    cfg, spec = served_spec(draft, target)
    notes: list = []
    try:
        model = _module(spec, cfg)
    except (BadInput, ValueError) as e:
        raise Refused(f"--draft {draft}: {e}") from None
    sd, hot = _state_dict(spec, _tensors(draft), target, notes, model.state_dict())
    missing, unexpected = model.load_state_dict({k: v for k, v in sd.items() if v is not None}, strict=False)
    if missing or unexpected:
        raise Refused(
            f"--draft {draft}: weights {sorted(missing)[:3]} missing, {sorted(unexpected)[:3]} not part "
            f"of the {spec.arch} eval builds (`sglang-eagle3 check {draft}` should have named this: a bug)"
        )
    bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise Refused(f"--draft {draft}: {bad[0]} holds NaN/Inf values (`sglang-eagle3 check {draft}` names them)")
    model = model.to(device).eval()
    for p in model.parameters():  # buffers (RoPE tables) stay fp32, as SGLang keeps its cos/sin cache
        p.data = p.data.to(dtype or torch.float32)
    tcfg = _target_config(target)
    hf, hf_from = served_hf_indices(cfg, spec, tcfg.get("num_hidden_layers") if tcfg else None)
    return LoadedDraft(model, hot.to(device) if hot is not None else None, spec, cfg, hf, hf_from, notes)


def _target_config(target: Path | None) -> dict | None:
    if target is None:
        return None

    return dict(language_config(read_json_file(target / "config.json", "target config")))


def _release():
    """The installed release's rules (draft/keys.Layout), the newest supported one's without SGLang."""
    return keys.installed_layout() if _sglang() else keys.resolve_layout(_newest())


def _sglang() -> bool:
    from ..versions import installed_version

    return installed_version() is not None


def _newest() -> str:

    return SUPPORTED_MAX
