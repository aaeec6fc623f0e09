"""Read a target directory the way draft training needs it, whether it is a plain DeepSeek-V3 or the
Kimi-K2.5 wrapper (`model_type: kimi_k25`, the language model's config under `text_config`, its tensors
under `language_model.`)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..sglang_runtime import language_config

# tensors found by name suffix (a wrapper prefixes them; vision tensors never end like these)
EMBED, HEAD, NORM = "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"


def text_config(target: Path) -> dict:
    return dict(language_config(json.loads((Path(target) / "config.json").read_text())))


def is_wrapper(target: Path) -> bool:
    return isinstance(json.loads((Path(target) / "config.json").read_text()).get("text_config"), dict)


def read_tensors(target: Path, suffixes=(EMBED, HEAD, NORM)) -> dict:
    """{suffix: tensor} for the language model's embed / lm_head / final norm."""
    from safetensors import safe_open

    found: dict = {}
    for f in sorted(Path(target).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                for s in suffixes:
                    if (k == s or k.endswith("." + s) or k.endswith(s)) and s not in found \
                            and "vision_tower" not in k and "mm_projector" not in k:
                        found[s] = st.get_tensor(k)
    missing = [s for s in suffixes if s not in found]
    if missing:
        raise FileNotFoundError(f"{target}: no tensor named *{missing[0]} in its safetensors files")
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
