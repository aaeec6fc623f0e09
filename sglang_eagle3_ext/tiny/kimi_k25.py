"""The built-in tiny Kimi-K2.5 target: SGLang's `KimiK25ForConditionalGeneration` (config `model_type:
kimi_k25`) around the tiny DeepSeek-V3 of tiny/deepseek_v3.py, with a one-block vision tower. Served text-only
(`--skip-tokenizer-init`, input_ids); the language model inside is the EAGLE-3 / dump target.

Weights: the tiny DeepSeek-V3's under `language_model.` (`language_model.model.layers.*`,
`language_model.lm_head.weight`, as the HF Kimi-K2.5 checkpoint names them), the vision tower and projector
under the HF names SGLang's KimiK25 `load_weights` renames (`blocks.N.wqkv` -> `attn.qkv_proj`, `wo` ->
`attn.proj`, `mm_projector.proj.0/2` -> `linear_1/2`). The text-only reference is the inner directory
`text/` (transformers' DeepseekV3ForCausalLM on the same language-model weights).

SGLang builds a multimodal processor for this architecture even with --skip-tokenizer-init, and the real
checkpoint ships it as remote code: so does this one (`tiny_kimi_processor.py`, a stand-in that serves no
images), hence `--trust-remote-code` in the presets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .._log import log_once
from ..outdir import OutputDirRefused, writing
from .deepseek_v3 import PREDICTABLE, ensure_tiny_target, reuse_existing
from .deepseek_v3 import default_dir as _target_dir

# vt_* are the names the HF Kimi-K2.5 config uses (SGLang's projector reads vt_hidden_size); the plain names
# are what SGLang's KimiK25VisionConfig / MoonViT read. Both are written, equal.
TINY_VISION = dict(
    patch_size=14,
    init_pos_emb_height=8,
    init_pos_emb_width=8,
    init_pos_emb_time=4,
    pos_emb_type="divided_fixed",
    hidden_size=64,
    num_attention_heads=2,
    num_hidden_layers=1,
    intermediate_size=128,
    merge_kernel_size=[2, 2],
    video_attn_type="spatial_temporal",
    merge_type="sd2_tpool",
    mm_projector_type="patchmerger",
    projector_hidden_act="gelu",
    projector_ln_eps=1e-5,
)
MEDIA_PLACEHOLDER = 163605  # Kimi-K2.5's id; outside the tiny vocab, so no text prompt hits it
PROCESSOR_FILE = "tiny_kimi_processor.py"
PROCESSOR_SRC = '''"""Stand-in for Kimi-K2.5's remote-code processor: what SGLang's kimi_k25 multimodal processor reads at
start-up (tokenizer, image_processor, media_processor.media_proc_cfg). The tiny target serves token ids; its
tokenizer is a word-level one over names t0..t{V-1} (tokenizer.json beside this file)."""


class _Media:
    media_proc_cfg = {"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 1024,
                      "patch_limit_on_one_side": 32, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}


class TinyKimiK25Processor:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.image_processor = None
        self.media_processor = _Media()

    @classmethod
    def register_for_auto_class(cls, *a, **k):
        pass

    @classmethod
    def from_pretrained(cls, path, *a, **k):
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)))
'''


def default_dir() -> Path:
    return _target_dir().with_name("tiny-kimi-k25")


# built-in wrapper targets: name -> ensure_tiny_kimi_target arguments (the round trip's is the predictable walk)
KIMI_TARGETS = {"tiny-kimi-k25": {}, "tiny-kimi-k25-predictable": dict(PREDICTABLE)}


def ensure_kimi_target(name: str, out: str | os.PathLike | None = None) -> Path:
    if name not in KIMI_TARGETS:
        raise ValueError(f"unknown built-in Kimi target {name!r}; available: {', '.join(KIMI_TARGETS)}")
    return ensure_tiny_kimi_target(out or default_dir().with_name(name), **KIMI_TARGETS[name])


def vision_config(text_hidden: int, **overrides) -> dict:
    v = {**TINY_VISION, **overrides}
    v.update(
        text_hidden_size=text_hidden,
        mm_hidden_size=v["hidden_size"],
        vt_hidden_size=v["hidden_size"],
        vt_num_attention_heads=v["num_attention_heads"],
        vt_num_hidden_layers=v["num_hidden_layers"],
        vt_intermediate_size=v["intermediate_size"],
        model_type="kimi_k25",
    )
    return v


def vision_shapes(v: dict) -> dict[str, tuple]:
    """HF checkpoint names and shapes of the vision tower + projector (SGLang's KimiK25 renames them)."""
    d, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    mh, mw = v["merge_kernel_size"]
    out = {
        "vision_tower.patch_embed.proj.weight": (d, 3, p, p),
        "vision_tower.patch_embed.proj.bias": (d,),
        "vision_tower.patch_embed.pos_emb.weight": (v["init_pos_emb_height"], v["init_pos_emb_width"], d),
    }
    for n in range(v["num_hidden_layers"]):
        b = f"vision_tower.encoder.blocks.{n}."
        out.update(
            {
                b + "norm0.weight": (d,),
                b + "norm0.bias": (d,),
                b + "norm1.weight": (d,),
                b + "norm1.bias": (d,),
                b + "mlp.fc0.weight": (i, d),
                b + "mlp.fc0.bias": (i,),
                b + "mlp.fc1.weight": (d, i),
                b + "mlp.fc1.bias": (d,),
                b + "wqkv.weight": (3 * d, d),
                b + "wqkv.bias": (3 * d,),
                b + "wo.weight": (d, d),
                b + "wo.bias": (d,),
            }
        )
    m = d * mh * mw
    out.update(
        {
            "vision_tower.encoder.final_layernorm.weight": (d,),
            "vision_tower.encoder.final_layernorm.bias": (d,),
            "mm_projector.pre_norm.weight": (d,),
            "mm_projector.pre_norm.bias": (d,),
            "mm_projector.proj.0.weight": (m, m),
            "mm_projector.proj.0.bias": (m,),
            "mm_projector.proj.2.weight": (v["text_hidden_size"], m),
            "mm_projector.proj.2.bias": (v["text_hidden_size"],),
        }
    )
    return out


def write_tokenizer(out: Path, vocab_size: int) -> None:
    """A word-level tokenizer over t0..t{V-1}: a real HF tokenizer for SGLang's processor code paths."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0").save_pretrained(str(out))


def kimi_config(text_cfg: dict, vision: dict) -> dict:
    text = dict(text_cfg)
    text.setdefault("architectures", ["DeepseekV3ForCausalLM"])
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text,
        "vision_config": vision,
        "media_placeholder_token_id": MEDIA_PLACEHOLDER,
        "pad_token_id": 0,
        "ignore_index": -100,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "auto_map": {"AutoProcessor": PROCESSOR_FILE[:-3] + ".TinyKimiK25Processor"},
    }


def ensure_tiny_kimi_target(out: str | os.PathLike | None = None, seed: int = 0, **tiny_kwargs) -> Path:
    """Write the tiny Kimi-K2.5 to `out` (default: the cache) unless a complete copy is there. tiny_kwargs go to
    tiny.ensure_tiny_target (e.g. **tiny.PREDICTABLE, route_bias, DeepseekV3Config overrides); the text-only
    DeepSeek-V3 with the same language-model weights stays in `out/text` (the reference)."""
    out = Path(out) if out else default_dir()
    settings = dict(seed=seed, **tiny_kwargs)
    if reuse_existing(out, "tiny --kimi", settings):
        return out
    import torch
    from safetensors.torch import load_file, save_file

    log_once("tiny-kimi", "making the tiny Kimi-K2.5 target in %s (first use)", out)
    try:
        with writing(out, tool="tiny --kimi", flag="OUT", record={"settings": settings}) as tmp:
            text_dir = ensure_tiny_target(tmp / "text", seed=seed, **tiny_kwargs)
            text_cfg = json.loads((text_dir / "config.json").read_text())
            tensors = {}
            for f in sorted(text_dir.glob("*.safetensors")):
                for k, t in load_file(str(f)).items():
                    # model.* -> language_model.model.*, lm_head -> language_model.lm_head
                    tensors["language_model." + k] = t
            vision = vision_config(int(text_cfg["hidden_size"]))
            g = torch.Generator().manual_seed(seed + 7)
            for k, shape in vision_shapes(vision).items():
                t = torch.randn(shape, generator=g) * 0.02
                if k.endswith(("norm0.weight", "norm1.weight", "final_layernorm.weight", "pre_norm.weight")):
                    t = torch.ones(shape)
                tensors[k] = t.to(torch.bfloat16)
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            (tmp / "config.json").write_text(json.dumps(kimi_config(text_cfg, vision), indent=2))
            (tmp / "processor_config.json").write_text(
                json.dumps(
                    {
                        "auto_map": {"AutoProcessor": PROCESSOR_FILE[:-3] + ".TinyKimiK25Processor"},
                        "processor_class": "TinyKimiK25Processor",
                    },
                    indent=2,
                )
            )
            (tmp / PROCESSOR_FILE).write_text(PROCESSOR_SRC)
            write_tokenizer(tmp, int(text_cfg["vocab_size"]))
            (tmp / ".complete").touch()
    except OutputDirRefused:
        if reuse_existing(out, "tiny --kimi", settings):  # another process made the same target meanwhile
            return out
        raise
    return out
