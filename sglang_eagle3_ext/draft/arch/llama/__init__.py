"""The Llama EAGLE-3 draft layout: SGLang's `LlamaForCausalLMEagle3` (models/llama_eagle3.py), what speculators,
SpecForge and the EAGLE repo train. N decoder layers (exactly one, `midlayer`, before 0.5.14), the first taking
cat(embeds, hidden) = 2 x hidden; fc over K aux states; per-release options fc_norm (0.5.14+), input_norm
(norm_before_fc, 0.5.18+), norm_output (0.5.14+).

This package is the reference of what a layout declares (draft/arch/__init__.Layout, checked when it registers);
each name says its job. Its roles beside it: net.py, eval's SGLang-equal network (`Net(config) -> nn.Module`).
"""

from __future__ import annotations

from ... import errors as E
from ...config_schema import eagle_layer_ids, norm_before_fc
from ...errors import Problem
from ...keys import LAYER
from ...layers import default_layers, eagle_fed_layers, record_eagle_layers
from ...target import hf_range_problems

NAME = "llama"  # registry name (also train's --draft-arch value)
ARCH = "LlamaForCausalLMEagle3"  # the `architectures` entry SGLang builds this class from
LABEL = None  # a word naming the layout in messages (None: the class name says it)
SGLANG_CLASS = "sglang.srt.models.llama_eagle3:LlamaForCausalLMEagle3"
ALGORITHM = "EAGLE3"  # the --speculative-algorithm that serves this layout (launch refuses another)
# the folder training/<ROUTE>/ that trains it (train.py: `train(options, out rule) -> summary`) and sizes it for
# train --dry-run (plan.py: `step(opts, target cfg, K, T, device, world, lengths)`); training imports it when used
ROUTE = "speculators"
TRAIN_PADS_TO_TOTAL_SEQ_LEN = True  # the route packs samples into --total-seq-len rows (else one sample a step)
TRAIN_SHARDS_WEIGHTS = True  # the route shards the weights over the ranks (FSDP; else DDP replicas)
READS_DRAFT_WINDOW = True  # the class runs --speculative-draft-window-size (sliding-window attention)
CONFIG_FIELDS: tuple[str, ...] = ()  # this layout's own config fields (positive integers)
DRAFT_VOCAB_REQUIRED = True  # the class fails without `draft_vocab_size` (null: share the target's head)
HOLDS_VOCAB = True  # the class has embeddings, an lm_head and d2t of its own (False: it runs on the target's)
# SGLang parameter (canonical name) -> the checkpoint keys the release's load_weights fuses into it itself.
# A layout with entries also defines prefused_problem, half_missing_problem and split_fused (see mla/).
FUSED: dict[str, tuple[str, ...]] = {}
# convert: the source formats this layout reads, as its refusal of an unknown config lists them
SOURCE_NAMES = (
    "speculators Eagle3Speculator",
    f"{ARCH} (SGLang/SpecForge)",
    "an EAGLE-repo LlamaForCausalLM with draft_vocab_size",
)
CONFIG_DEFAULTS: dict = {}  # convert: config keys SGLang needs that a source may lack
_DROP_FROM_LAYER_CFG = {"architectures", "model_type", "transformers_version", "_name_or_path", "auto_map"}


def config_fields(cfg: dict, release, where: str) -> tuple[dict, list[Problem]]:
    """(this layout's dims for DraftSpec.dims, config problems); a CONFIG_MISSING among them stops the rules."""
    return {}, []


# (the aux layer ids the class reads, the HF indices the draft records, problems); ids None: SGLang's default
layer_ids = eagle_layer_ids
# the rules a target's language config (its layer count, vocabulary) puts on the draft beyond hidden/vocab/dtype
target_problems = hf_range_problems
# (the HF indices a server feeds the draft, why), from its config, DraftSpec, the target's layer count (or None)
# and the release; None where they cannot be told: `check --data` compares them with the data's
fed_layers = eagle_fed_layers


def aux_count(cfg: dict, ids, release, where: str) -> tuple[int, list[Problem]]:
    """K, the number of aux states the release builds fc for, and disagreements about it."""
    P: list[Problem] = []
    n_aux = cfg.get("num_aux_hidden_states")
    if release.midlayer:
        if ids and len(ids) != 3:  # <=0.5.10 builds Linear(3*hidden_in, hidden) whatever the config says
            P.append(
                Problem(
                    E.UNSUPPORTED_BY_RELEASE,
                    f"{where}: {len(ids)} aux layers, but SGLang {release.release} "
                    f"only supports 3; use SGLang >= 0.5.14",
                )
            )
        if cfg["num_hidden_layers"] != 1:
            P.append(
                Problem(
                    E.UNSUPPORTED_BY_RELEASE,
                    f"{where}: num_hidden_layers={cfg['num_hidden_layers']}, SGLang "
                    f"{release.release} supports exactly 1 draft layer",
                )
            )
        return 3, P
    if ids and n_aux and n_aux != len(ids):
        P.append(
            Problem(
                E.AUX_COUNT,
                f"{where}: num_aux_hidden_states={n_aux} but eagle_aux_hidden_state_layer_ids "
                f"has {len(ids)} entries {ids}",
            )
        )
    return n_aux or (len(ids) if ids else 3), P


def option_problems(cfg: dict, release, where: str) -> list[Problem]:
    """Trained options this release's class would ignore."""
    P: list[Problem] = []
    if cfg.get("fc_norm") or cfg.get("use_aux_norm"):
        if not release.fc_norm:
            P.append(
                Problem(
                    E.UNSUPPORTED_BY_RELEASE,
                    f"{where}: fc_norm=true but SGLang {release.release} has no "
                    f"fc_norm (it would be ignored); use SGLang >= 0.5.14",
                )
            )
    if norm_before_fc(cfg) and not release.input_norm:
        P.append(
            Problem(
                E.UNSUPPORTED_BY_RELEASE,
                f"{where}: norm_before_fc=true but SGLang {release.release} has no "
                f"input_norm (it would be ignored); use SGLang >= 0.5.18",
            )
        )
    if cfg.get("norm_output") and not release.norm_output:
        P.append(
            Problem(E.UNSUPPORTED_BY_RELEASE, f"{where}: norm_output=true but SGLang {release.release} ignores it")
        )
    return P


def layer_shapes(spec) -> dict[str, tuple[int, ...]]:
    """Canonical key -> shape of the decoder layers' tensors (the rules add fc, norms, heads, d2t)."""
    H, hd = spec.hidden, spec.head_dim
    q, kv = spec.n_heads * hd, spec.n_kv * hd
    shapes = {}
    for n in range(spec.n_layers):
        w = 2 * H if n == 0 else H  # the first layer takes cat(embeds, hidden)
        p = f"layers.{n}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (q, w),
                p + "self_attn.k_proj.weight": (kv, w),
                p + "self_attn.v_proj.weight": (kv, w),
                p + "self_attn.o_proj.weight": (H, q),
                p + "mlp.gate_proj.weight": (spec.inter, H),
                p + "mlp.up_proj.weight": (spec.inter, H),
                p + "mlp.down_proj.weight": (H, spec.inter),
                p + "input_layernorm.weight": (H,),
                p + "hidden_norm.weight": (H,),
                p + "post_attention_layernorm.weight": (H,),
            }
        )
    return shapes


def optional_keys(spec) -> set[str]:
    """Keys of layer_shapes a checkpoint may lack (the class's initial value is the trained one): layers >= 1
    have no input_layernorm of their own in speculators' drafts."""
    return {k for k in layer_shapes(spec) if not k.startswith("layers.0.") and k.endswith(".input_layernorm.weight")}


def tensor_problem(canon: str, shape: tuple, want: tuple, spec, where: str) -> Problem | None:
    """A layout-precise problem for a wrong-shaped tensor; None: the rules' generic shape message."""
    return None


def unexpected_problem(canon: str, shape: tuple, spec, where: str) -> Problem | None:
    """A layout-precise problem for a tensor the class has no parameter for; None: the rules' generic one."""
    return None


def to_release(canon: str, release) -> tuple[str | None, Problem | None]:
    """The name this release's load_weights understands, or a Problem saying why it cannot hold the tensor."""
    m = LAYER.match(canon)
    if release.midlayer and m:
        if m.group(1) != "0":
            return None, Problem(
                E.UNSUPPORTED_BY_RELEASE,
                f"{canon}: SGLang {release.release} has exactly one draft layer (midlayer); "
                f"use SGLang >= 0.5.14 for multi-layer drafts",
                key=canon,
            )
        return "midlayer." + m.group(2), None
    if canon.startswith("fc_norm.") and not release.fc_norm:
        return None, Problem(
            E.UNSUPPORTED_BY_RELEASE,
            f"{canon}: the draft was trained with per-aux fc_norm, which SGLang {release.release} "
            f"does not have (it would be ignored, acceptance collapses); use SGLang >= 0.5.14",
            key=canon,
        )
    if canon.startswith("input_norm.") and not release.input_norm:
        return None, Problem(
            E.UNSUPPORTED_BY_RELEASE,
            f"{canon}: the draft was trained with norm_before_fc (input_norm), which SGLang "
            f"{release.release} does not have (it would be ignored); use SGLang >= 0.5.18",
            key=canon,
        )
    return canon, None


def launch_problems(dims: dict, flags: dict) -> list[str]:
    """launch: what in SGLang's parsed server flags (dest -> value) this draft would be served wrongly under."""
    return []


def reads_num_aux(release) -> bool:
    """convert: whether the release's class reads `num_aux_hidden_states` (else it is dropped from the config)."""
    return not release.midlayer


def record_layers(cfg: dict, hf, release) -> list[str]:
    """convert: the trained HF indices `hf` written into the SGLang config `cfg` as the release reads them;
    warnings."""
    return record_eagle_layers(cfg, hf, release, reads_num_aux(release))


def source_format(cfg: dict) -> str | None:
    """convert: the name of the source format `cfg` is in when this layout reads it, else None."""
    archs = cfg.get("architectures") or []
    if cfg.get("speculators_model_type") not in (None, "eagle3"):
        return None  # another layout's speculators format (or none's: convert lists the formats it reads)
    if cfg.get("speculators_model_type") or "Eagle3Speculator" in archs or "transformer_layer_config" in cfg:
        return "speculators"
    if ARCH in archs:
        return "sglang"  # SGLang / SpecForge
    if "LlamaForCausalLM" in archs and "draft_vocab_size" in cfg:
        return "eagle"  # SafeAILab EAGLE repo
    return None


def source_key(canon: str, fmt: str) -> tuple[str, str | None]:
    """convert: a canonical key of a `fmt` checkpoint under SGLang's name for it, and the rename note (or None)."""
    if (
        fmt == "speculators"
        and canon.startswith("layers.")
        and not canon.startswith("layers.0.")
        and canon.endswith(".input_layernorm.weight")
    ):
        # speculators layers >= 1 are plain decoder layers; SGLang's use hidden_norm in that role
        return canon.replace(
            ".input_layernorm.", ".hidden_norm."
        ), "layers.N.input_layernorm -> layers.N.hidden_norm (N>=1)"
    return canon, None


def heldout(n: int, train_ratio: float) -> tuple[int, str]:
    """The first of the n sample files train's route validates on (the rest are held out), and the rule in words:
    speculators' split, rows [int(n * train_ratio), n)."""
    start = int(n * train_ratio)
    return start, (
        f"rows {start}..{n - 1} of {n}: speculators' validation split under `train --train-ratio {train_ratio:g}`"
    )


def default_aux_layers(num_target_layers: int, num_draft_layers: int, caps=None) -> list[int]:
    """The HF indices a fresh draft of this layout (`num_draft_layers` layers) is trained on and the dump captures
    when none are named, for a target of `num_target_layers`; ValueError saying why there are none (`caps`: the
    release's versions.Capabilities, when known)."""
    return default_layers(num_target_layers)


def init_settings(spec, cfg: dict) -> dict:
    """train --init-from: the option values a continued run takes from the draft, beyond the shared ones."""
    s = {"head_dim": spec.head_dim}
    if isinstance(cfg.get("max_position_embeddings"), int):
        s["max_position_embeddings"] = cfg["max_position_embeddings"]
    return s


def init_problems(spec, cfg: dict) -> list[str]:
    """train --init-from: what the draft was trained with that train's route does not build."""
    on = [
        n
        for n, v in (
            ("fc_norm", spec.fc_norm),
            ("norm_before_fc", spec.norm_before_fc),
            ("norm_output", bool(cfg.get("norm_output"))),
        )
        if v
    ]
    return [f"it was trained with {', '.join(on)}, which train's Llama drafts do not have"] if on else []


def from_speculators(cfg: dict, hf_override) -> tuple[dict, list[int]]:
    """A speculators Eagle3Speculator config as SGLang's (its layer config holds the Llama fields), and the HF
    hidden-state indices it was trained on."""
    if not isinstance(cfg.get("transformer_layer_config"), dict):
        raise E.conversion_refused(
            "a speculators config (Eagle3Speculator) without its transformer_layer_config "
            "object: the draft's layer sizes are unknown; re-save it with speculators",
            E.CONFIG_INVALID,
        )
    tl = dict(cfg["transformer_layer_config"])
    if tl.get("model_type", "llama") != "llama":
        raise E.conversion_refused(
            f"transformer_layer_config.model_type={tl.get('model_type')!r}: SGLang's EAGLE-3 "
            f"draft is Llama-only (e.g. Qwen3 layers have qk-norm it lacks); retrain with a "
            f"llama layer config"
        )
    if cfg.get("norm_before_residual"):
        raise E.conversion_refused(
            "norm_before_residual=true: SGLang always uses the un-normed residual, so the draft "
            "would run a different network than it was trained as; retrain with "
            "norm_before_residual=false"
        )
    out = {k: v for k, v in tl.items() if k not in _DROP_FROM_LAYER_CFG}
    hidden = tl["hidden_size"]
    out.update(
        architectures=[ARCH],
        model_type="llama",
        tie_word_embeddings=False,
        draft_vocab_size=cfg.get("draft_vocab_size"),
        target_hidden_size=cfg.get("target_hidden_size") or hidden,
    )
    # speculators' ids already mean HF hidden_states[k] (no +1)
    hf = hf_override or cfg.get("eagle_aux_hidden_state_layer_ids")
    if not hf:
        raise E.conversion_refused(
            "the speculators config has no eagle_aux_hidden_state_layer_ids (it was resolved "
            "from the verifier at training time); pass --hf-indices with the HF hidden_states "
            "indices used in training",
            E.CONFIG_MISSING,
        )
    for flag in ("fc_norm", "norm_output"):
        if cfg.get(flag):
            out[flag] = True
    out["eagle_config"] = {"norm_before_fc": True} if cfg.get("norm_before_fc") else {}
    out["num_aux_hidden_states"] = len(hf)
    return out, list(hf)


READERS = {"speculators": from_speculators}  # convert: source format -> reader of a config not SGLang-shaped
