"""Read a target directory the way draft training needs it, whether it is a plain DeepSeek-V3 or the
Kimi-K2.5 wrapper (`model_type: kimi_k25`, the language model's config under `text_config`, its tensors
under `language_model.`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..boundary import field, read_json_file
from ..draft.target import names_tensor
from ..server.runtime import language_config

# the language model's tensors, found as draft/target.names_tensor finds them (a wrapper prefixes them)
EMBED, HEAD, NORM = "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"


def _config(target: Path) -> dict:

    return read_json_file(Path(target) / "config.json", "target config")


def text_config(target: Path) -> dict:
    """The language model's config, with the sizes training needs checked (BadInput naming the file)."""

    cfg = dict(language_config(_config(target)))
    where = str(Path(target) / "config.json")
    for k in ("vocab_size", "hidden_size", "num_hidden_layers"):
        field(cfg, k, int, where, minimum=1)
    return cfg


def is_wrapper(target: Path) -> bool:
    return isinstance(_config(target).get("text_config"), dict)


def read_tensors(target: Path, suffixes=(EMBED, HEAD, NORM)) -> dict:
    """{suffix: tensor} for the language model's embed / lm_head / final norm."""
    from safetensors import safe_open

    found: dict = {}
    for f in sorted(Path(target).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                for s in suffixes:
                    if s not in found and names_tensor(k, s):
                        found[s] = st.get_tensor(k)
    missing = [s for s in suffixes if s not in found]
    if missing:
        raise FileNotFoundError(f"{target}: no tensor named *{missing[0]} in its safetensors files")
    import torch

    for s, t in found.items():  # a NaN teacher makes every argmax agree: accuracy 1.0 from nothing
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(
                f"{target}: the target's {s} is not finite ({int((~torch.isfinite(t)).sum())} NaN/Inf "
                f"values): the teacher distribution would be NaN; check the target checkpoint"
            )
    return found


def verifier_view(target: Path, out: Path) -> Path:
    """A directory speculators can read as its verifier: the text config at the top level, the target's
    safetensors linked in place (speculators finds the embed / head / norm tensors by suffix)."""
    target = Path(target)
    if not is_wrapper(target):
        return target
    out.mkdir(parents=True, exist_ok=True)
    cfg = text_config(target)
    cfg.setdefault("architectures", ["DeepseekV3ForCausalLM"])
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in target.iterdir():
        if f.name.endswith((".safetensors", ".safetensors.index.json")) and not (out / f.name).exists():
            os.symlink(f.resolve(), out / f.name)
    return out
