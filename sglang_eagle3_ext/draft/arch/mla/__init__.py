"""The MLA EAGLE-3 draft layout: SGLang's `Eagle3DeepseekV2ForCausalLM` (models/kimi_k25_eagle3.py, 0.5.14+).

Kimi-K2.5/K2.6's published drafts: one decoder layer with DeepSeek MLA attention whose q/kv
down-projections take cat(input_layernorm(embed), hidden_norm(target states)) = 2 x hidden, a dense
MLP, and `fc` over K aux states (EAGLE-3.1 adds `fc_norm` per aux chunk and `norm_output`).
What the release's own load_weights does, and where it fails silently:
  - `layers.0.*` -> `model.midlayer.*`; anything else gets `model.` (a `model.`-prefixed key is dropped);
  - `q_a_proj` + `kv_a_proj_with_mqa` are cached and concatenated into `fused_qkv_a_proj_with_mqa`
    once both arrived: one half missing leaves the projection uninitialised, without a word;
  - a pre-fused `fused_qkv_a_proj_with_mqa` key is read as a kv half (its name contains it) and dropped;
  - `num_aux_hidden_states` is not read: K = len(eagle_aux_hidden_state_layer_ids), default 3;
  - `draft_vocab_size` missing means "take the target's lm_head" (no error, unlike the Llama class);
  - `post_load_weights` splits `kv_b_proj` into w_kc / w_vc.
The names this module declares are those of draft/arch/llama/ (the reference).
"""

from __future__ import annotations

from ... import errors as E
from ...config_schema import eagle_config, eagle_layer_ids
from ...errors import Problem
from ...keys import LAYER
from ...layers import default_layers, eagle_fed_layers, record_eagle_layers
from ...target import hf_range_problems

NAME = "mla"
ARCH = "Eagle3DeepseekV2ForCausalLM"
LABEL = "MLA"
SGLANG_CLASS = "sglang.srt.models.kimi_k25_eagle3:Eagle3DeepseekV2ForCausalLM"
ALGORITHM = "EAGLE3"  # the --speculative-algorithm that serves this layout (launch refuses another)
ROUTE = "mla"
TRAIN_PADS_TO_TOTAL_SEQ_LEN = False  # one sample per micro-batch: the plan sizes the longest
TRAIN_SHARDS_WEIGHTS = False  # DDP: every rank holds the whole draft
READS_DRAFT_WINDOW = False  # the class runs full attention whatever the window says
REQUIRES = "HAS_MLA_DRAFT"  # the release capability flag saying the class exists
SINCE = "0.5.14"
SPECFORGE = "DeepseekV3ForCausalLMEagle3"  # SpecForge's own class name for this layout (`midlayer.*`)
ATTN = "layers.0.self_attn."
Q_HALF, KV_HALF = ATTN + "q_a_proj.weight", ATTN + "kv_a_proj_with_mqa.weight"
FUSED_KEY = ATTN + "fused_qkv_a_proj_with_mqa.weight"
DIM_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
CONFIG_FIELDS = DIM_FIELDS
DRAFT_VOCAB_REQUIRED = False  # the class reads a missing draft_vocab_size as null
HOLDS_VOCAB = True
FUSED = {FUSED_KEY: (Q_HALF, KV_HALF)}
SOURCE_NAMES = (f"{ARCH} (MLA, Kimi-K2.5)", f"{SPECFORGE} (SpecForge MLA)")
READERS: dict = {}
CONFIG_DEFAULTS = {"model_type": "deepseek_v3"}  # SGLang reads the config through AutoConfig


def config_fields(cfg: dict, release, where: str) -> tuple[dict, list[Problem]]:
    """MLA dims for DraftSpec.dims, and config problems."""
    P = E.class_missing(where, ARCH, "an MLA EAGLE-3 draft, e.g. Kimi-K2.5's", release, REQUIRES, SINCE, "such class")
    bad = [f for f in DIM_FIELDS if not isinstance(cfg.get(f), int) or cfg.get(f) <= 0]
    for f in bad:
        P.append(
            Problem(
                E.CONFIG_MISSING,
                f"{where}: `{f}` missing or not a positive integer — SGLang's MLA draft layer "
                f"needs it (q_lora_rank null makes it refuse to start)",
            )
        )
    if cfg.get("num_hidden_layers") not in (None, 1):
        P.append(
            Problem(
                E.UNSUPPORTED_BY_RELEASE,
                f"{where}: num_hidden_layers={cfg.get('num_hidden_layers')}, SGLang's "
                f"{ARCH} has exactly one draft layer",
            )
        )
    if eagle_config(cfg).get("norm_before_fc") or cfg.get("norm_before_fc"):
        P.append(
            Problem(
                E.UNSUPPORTED_OPTION,
                f"{where}: norm_before_fc=true — SGLang's {ARCH} has no input_norm, it "
                f"would run a different network than the one trained",
            )
        )
    fields = {f: cfg.get(f) or 0 for f in DIM_FIELDS}
    return {
        "q_lora": fields["q_lora_rank"],
        "kv_lora": fields["kv_lora_rank"],
        "rope": fields["qk_rope_head_dim"],
        "nope": fields["qk_nope_head_dim"],
        "v_head": fields["v_head_dim"],
    }, P


layer_ids = eagle_layer_ids
target_problems = hf_range_problems
fed_layers = eagle_fed_layers


def aux_count(cfg: dict, ids, release, where: str) -> tuple[int, list[Problem]]:
    """K exactly as the release computes it (num_aux_hidden_states is not read by this class)."""
    ids = eagle_config(cfg).get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    k = len(ids) if isinstance(ids, list) and ids else 3
    n_aux = cfg.get("num_aux_hidden_states")
    if n_aux and n_aux != k:
        return k, [
            Problem(
                E.AUX_COUNT,
                f"{where}: num_aux_hidden_states={n_aux} but SGLang's {ARCH} ignores it "
                f"and builds fc for K={k} (the number of eagle_aux_hidden_state_layer_ids)",
            )
        ]
    return k, []


def option_problems(cfg: dict, release, where: str) -> list[Problem]:
    return []  # config_fields judges this class's options


def layer_shapes(spec) -> dict[str, tuple[int, ...]]:
    H, n, d = spec.hidden, spec.n_heads, spec.dims
    a, m, L = ATTN, "layers.0.mlp.", "layers.0."
    return {
        Q_HALF: (d["q_lora"], 2 * H),
        a + "q_a_layernorm.weight": (d["q_lora"],),
        a + "q_b_proj.weight": (n * (d["nope"] + d["rope"]), d["q_lora"]),
        KV_HALF: (d["kv_lora"] + d["rope"], 2 * H),
        a + "kv_a_layernorm.weight": (d["kv_lora"],),
        a + "kv_b_proj.weight": (n * (d["nope"] + d["v_head"]), d["kv_lora"]),
        a + "o_proj.weight": (H, n * d["v_head"]),
        m + "gate_proj.weight": (spec.inter, H),
        m + "up_proj.weight": (spec.inter, H),
        m + "down_proj.weight": (H, spec.inter),
        L + "input_layernorm.weight": (H,),
        L + "hidden_norm.weight": (H,),
        L + "post_attention_layernorm.weight": (H,),
    }


def _dims(spec) -> str:
    d = spec.dims
    return (
        f"hidden {spec.hidden}, heads {spec.n_heads}, q_lora_rank {d['q_lora']}, kv_lora_rank {d['kv_lora']}, "
        f"qk_rope_head_dim {d['rope']}, qk_nope_head_dim {d['nope']}, v_head_dim {d['v_head']}"
    )


def _implied(canon: str, shape: tuple, spec) -> str:
    """What the checkpoint tensor says the config should be (the usual cause: a config from another draft)."""
    if canon.endswith("kv_a_layernorm.weight") and len(shape) == 1:
        return f"; the checkpoint has kv_lora_rank={shape[0]}"
    if canon.endswith("q_a_layernorm.weight") and len(shape) == 1:
        return f"; the checkpoint has q_lora_rank={shape[0]}"
    kv_lora = spec.dims["kv_lora"]
    if canon == KV_HALF and len(shape) == 2 and shape[0] > kv_lora:
        return f"; with kv_lora_rank={kv_lora} the checkpoint has qk_rope_head_dim={shape[0] - kv_lora}"
    if canon == Q_HALF and len(shape) == 2:
        return f"; the checkpoint has q_lora_rank={shape[0]}"
    return ""


def tensor_problem(canon: str, shape: tuple, want: tuple, spec, where: str) -> Problem | None:
    """A precise problem for a wrong-shaped MLA attention tensor; None for tensors this module does not own."""
    if canon in FUSED:
        return None  # the rules report a pre-fused key with prefused_problem
    if canon in (Q_HALF, KV_HALF) and len(shape) == 2 and shape[1] == spec.hidden and want[1] == 2 * spec.hidden:
        return Problem(
            E.MLA_INPUT,
            f"{where}: {canon} is {list(shape)}: it takes 1 x hidden ({spec.hidden}), but the "
            f"EAGLE-3 MLA draft layer feeds it cat(embeds, target states) = 2 x hidden "
            f"({list(want)}). This is a plain DeepSeek attention layer (an MTP/NextN layer?), "
            f"not an EAGLE-3 draft layer",
            key=canon,
        )
    if canon.startswith(ATTN):
        return Problem(
            E.MLA_DIMS,
            f"{where}: {canon} is {list(shape)}, expected {list(want)} from the config's MLA "
            f"dims ({_dims(spec)}){_implied(canon, shape, spec)} — the config does not "
            f"describe these weights",
            key=canon,
        )
    return None


def optional_keys(spec) -> set[str]:
    return set()  # one layer: every tensor is trained


def unexpected_problem(canon: str, shape: tuple, spec, where: str) -> Problem | None:
    return None


def to_release(canon: str, release) -> tuple[str | None, Problem | None]:
    """The release's load_weights maps `layers.0.*` itself in every release."""
    m = LAYER.match(canon)
    if m and m.group(1) != "0":
        return None, Problem(
            E.UNSUPPORTED_BY_RELEASE, f"{canon}: SGLang's MLA EAGLE-3 draft has exactly one layer", key=canon
        )
    return canon, None


def launch_problems(dims: dict, flags: dict) -> list[str]:
    """launch: what in SGLang's parsed server flags (dest -> value) this draft would be served wrongly under."""
    return []


def reads_num_aux(release) -> bool:
    return False  # K = len(eagle_aux_hidden_state_layer_ids)


def record_layers(cfg: dict, hf, release) -> list[str]:
    return record_eagle_layers(cfg, hf, release, False)


def source_format(cfg: dict) -> str | None:
    archs = cfg.get("architectures") or []
    if ARCH in archs:
        return "sglang-mla"  # Kimi-K2.5's published MLA drafts (SGLang's class)
    if SPECFORGE in archs:
        return "specforge-mla"  # SpecForge's MLA draft: its own class name, `midlayer.*`, fc over 3 aux states
    return None


def source_key(canon: str, fmt: str) -> tuple[str, str | None]:
    return canon, None


def heldout(n: int, train_ratio: float) -> tuple[int, str]:
    """train's MLA route validates on the files past int(n * train_ratio), at least one (none of one file)."""
    k = max(1, n - int(n * train_ratio)) if n > 1 and train_ratio < 1 else 0
    if not k:
        return n, f"`train --draft-arch mla` holds none of {n} sample(s) out at --train-ratio {train_ratio:g}"
    return n - k, (
        f"the last {k} of {n} samples: the validation files `train --draft-arch mla` holds out at "
        f"--train-ratio {train_ratio:g}"
    )


def default_aux_layers(num_target_layers: int, num_draft_layers: int, caps=None) -> list[int]:
    """See llama/: the dump's default, as for every EAGLE-3 draft."""
    return default_layers(num_target_layers)


def init_settings(spec, cfg: dict) -> dict:
    return {}  # the shared settings are the whole shape (one layer, MLA dims from the target)


def init_problems(spec, cfg: dict) -> list[str]:
    if spec.lm_head_rows != spec.vocab:
        return [
            f"an MLA draft with draft_vocab_size {spec.lm_head_rows}: train's MLA route trains the full target "
            f"vocabulary ({spec.vocab})"
        ]
    return []


# --- the fused q/kv down-projection (FUSED) ------------------------------------------------------------


def prefused_problem(canon: str, where: str) -> Problem:
    return Problem(
        E.UNEXPECTED_WEIGHT,
        f"{where}: {canon} is stored pre-fused; SGLang's {ARCH}.load_weights reads it "
        f"as a kv_a_proj_with_mqa half and drops it silently — convert it (python -m "
        f"sglang_eagle3_ext.convert SRC DST splits it into q_a_proj + kv_a_proj_with_mqa)",
        key=canon,
    )


def split_fused(canon: str, tensor, spec) -> list[tuple[str, object]]:
    """The halves SGLang fuses itself, from a pre-fused tensor (rows: q_lora, then kv_lora + rope)."""
    q = spec.dims["q_lora"]
    return [(Q_HALF, tensor[:q].clone()), (KV_HALF, tensor[q:].clone())]


def half_missing_problem(missing: str, present: str, where: str) -> Problem:
    return Problem(
        E.FUSED_HALF,
        f"{where}: {missing} missing while {present} is there — SGLang fuses the two into "
        f"fused_qkv_a_proj_with_mqa only when both arrive, so the whole q/kv down-projection "
        f"would stay uninitialised (silently, in SGLang alone)",
        key=missing,
    )
