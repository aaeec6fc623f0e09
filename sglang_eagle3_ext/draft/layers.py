"""Which target hidden states an EAGLE-3 draft is fed: the one place for the layer-id rules.

Convention (transformers' `output_hidden_states`): HF index i = input of decoder layer i = output of layer
i-1 (0 = embeddings). SGLang's DeepseekV2Model / LlamaModel loop index i captures the input of layer i, so
`layers_to_capture` holds HF indices. Two rules live here, used by the dump, training, the loader's
capture-layer patch, `convert` and `check`:

- the default aux layers when nobody names them (`default_layers`);
- the release's +1 rule: what `set_eagle3_layers_to_capture(ids)` makes SGLang capture (`release_capture`),
  and its inverse, the ids that make an unpatched release capture given HF indices (`release_aux_ids`).

DFlash drafts (block diffusion) read K target states named by `dflash_config.target_layer_ids`, 0-based "after
layer i" ids: `set_dflash_layers_to_capture(ids)` captures `id + 1` on every release that has it, so id i is HF
index i + 1 (`dflash_capture`, `dflash_ids`); with no ids SGLang picks `build_target_layer_ids(n_target,
n_draft_layers)` (`dflash_default_ids`). speculators' DFlash `aux_hidden_state_layer_ids` and the dump record HF
indices.
"""

from __future__ import annotations

from ..boundary import check_type, list_of

# The draft config field (inside `eagle_config`) holding the HF indices the draft was trained on.
HF_INDICES_FIELD = "hf_hidden_state_indices"
# SGLang's own field (inside `eagle_config`): ids that its +1 rule turns into HF indices.
AUX_IDS_FIELD = "eagle_aux_hidden_state_layer_ids"


def sglang_default_layers(num_layers: int) -> list[int]:
    """What SGLang captures for a draft whose config names no layer ids: [2, n//2, n-3] (its
    set_eagle3_layers_to_capture(None), every release; loop indices = HF indices)."""
    return [2, num_layers // 2, num_layers - 3]


def default_layers(num_layers: int) -> list[int]:
    """The aux layers a dump captures and a draft is trained on when none are named: SGLang's default
    ([2, 30, 58] for 61 layers, speculators' too). Where that gives no three distinct increasing ids
    (n < 7, test models) SGLang's default cannot feed a three-state draft at all, so [1, n//2, n-1]:
    the draft records them (HF_INDICES_FIELD) and the capture-layer patch serves exactly those."""
    ids = sglang_default_layers(num_layers)
    if not ids[0] < ids[1] < ids[2]:
        ids = [1, num_layers // 2, num_layers - 1]
    return ids


def release_capture(ids, always_plus_one: bool) -> list[int]:
    """The HF indices SGLang captures for `set_eagle3_layers_to_capture(ids)`: every id + 1 on releases that
    always add it (<= 0.5.10: `always_plus_one`), from 0.5.14 only when ids[0] == 1, else the ids as they are."""
    ids = [int(i) for i in ids]
    return [i + 1 for i in ids] if always_plus_one or (ids and ids[0] == 1) else ids


def release_aux_ids(hf_indices, layout) -> tuple[list[int], str | None]:
    """eagle_aux_hidden_state_layer_ids that make an unpatched release (`layout`: its release name and
    capture_always_plus_one) capture `hf_indices`, and a warning when no such ids exist for that release."""
    hf = [int(i) for i in hf_indices]
    if layout.capture_always_plus_one:
        if min(hf, default=1) >= 1:
            return [i - 1 for i in hf], None
        from ..versions import capabilities_for_version, layer0_refusal

        return hf, layer0_refusal(capabilities_for_version(layout.release)) or (
            f"SGLang {layout.release} adds 1 to every id, so HF index 0 cannot be expressed; serve with "
            f"sglang_eagle3_ext active"
        )
    if release_capture(hf, False) == hf:
        return hf, None
    return hf, (
        f"SGLang {layout.release} adds 1 to ids starting with 1, so HF indices {hf} are only captured "
        f"exactly with sglang_eagle3_ext active (it reads {HF_INDICES_FIELD})"
    )


def recorded_hf_indices(draft_cfg: dict | None) -> list | None:
    """The HF indices a draft's config records (HF_INDICES_FIELD), as written; None when it records none."""
    ec = (draft_cfg or {}).get("eagle_config") or {}
    return ec.get(HF_INDICES_FIELD) if isinstance(ec, dict) else None


def fed_hf_indices(
    draft_cfg: dict, num_layers: int, always_plus_one: bool, where: str = "draft config"
) -> tuple[list[int], str]:
    """(HF indices the served draft is fed, why): its recorded indices (the capture-layer patch serves exactly
    those), else the release's +1 rule on its ids, else SGLang's default for a target of `num_layers`.
    BadInput naming `where` when the config holds something else than lists of indices there."""

    ec = check_type(draft_cfg.get("eagle_config") or {}, dict, f"{where}: eagle_config")
    hf = ec.get(HF_INDICES_FIELD)
    if hf:
        return list(
            list_of(hf, int, f"{where}: eagle_config.{HF_INDICES_FIELD}", minimum=0)
        ), f"eagle_config.{HF_INDICES_FIELD}"
    ids = ec.get(AUX_IDS_FIELD)
    if not ids:
        return sglang_default_layers(num_layers), "no layer ids, SGLang's default"
    list_of(ids, int, f"{where}: eagle_config.{AUX_IDS_FIELD}", minimum=0)
    return release_capture(ids, always_plus_one), f"{AUX_IDS_FIELD}={list(ids)} under this release's +1 rule"


# ---- DFlash ------------------------------------------------------------------------------------------------


def dflash_default_ids(num_target_layers: int, num_draft_layers: int) -> list[int] | None:
    """SGLang's `build_target_layer_ids` (speculative/dflash_utils.py, every release with DFlash): the 0-based
    "after layer i" ids of a DFlash draft whose config names none, spread over layers 1..n-3; None where SGLang
    raises instead (no layers, or several draft layers over < 4 target layers)."""
    if num_target_layers <= 0 or num_draft_layers <= 0:
        return None
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        return None
    span = end - start
    return [int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


def dflash_capture(ids) -> list[int]:
    """The HF indices SGLang captures for DFlash target_layer_ids `ids` (always + 1)."""
    return [int(i) + 1 for i in ids]


def dflash_ids(hf_indices) -> list[int]:
    """target_layer_ids that make SGLang capture HF `hf_indices` (the inverse of dflash_capture)."""
    return [int(i) - 1 for i in hf_indices]


def dflash_default_layers(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The HF indices a DFlash draft of `num_draft_layers` layers is fed when its config names no ids (SGLang's
    rule, captured with its +1); ValueError when they are not distinct (too few target layers for as many)."""
    ids = dflash_default_ids(num_target_layers, num_draft_layers)
    if ids is None:
        raise ValueError(
            f"SGLang's DFlash rule has no layers for {num_draft_layers} draft layer(s) of a {num_target_layers}-layer "
            f"target (it needs at least 4); name the layers (HF indices 1..{num_target_layers - 1})"
        )
    hf = dflash_capture(ids)
    if len(set(hf)) != len(hf):
        raise ValueError(
            f"SGLang's DFlash rule picks HF hidden_states {hf} for {num_draft_layers} draft layers of a "
            f"{num_target_layers}-layer target: not distinct; name the layers (HF indices 1..{num_target_layers - 1})"
        )
    return hf


def dflash_refusal(caps) -> str | None:
    """Why the release of `caps` (versions.Capabilities) cannot serve a DFlash draft; None where it can."""
    from ..versions import _FLAG_SINCE

    if caps.HAS_DFLASH:
        return None
    return (
        f"SGLang {caps.version} has no DFlash drafts (no DFlashDraftModel, no set_dflash_layers_to_capture on "
        f"DeepSeek targets): use SGLang {_FLAG_SINCE['HAS_DFLASH']}+"
    )


def dflash_aux_layers(num_target_layers: int, num_draft_layers: int, caps=None) -> list[int]:
    """The HF indices a fresh DFlash draft of `num_draft_layers` layers is trained on and fed when none are named
    (dflash_default_layers); ValueError saying why there are none, the release of `caps` first (when given)."""
    why = dflash_refusal(caps) if caps is not None else None
    if why:
        raise ValueError(why)
    return dflash_default_layers(num_target_layers, num_draft_layers)


# ---- what an EAGLE-3 layout (draft/arch) declares through these rules ------------------------------------------


def eagle_fed_layers(draft_cfg: dict, spec, n_target: int | None, release) -> tuple[list[int] | None, str]:
    """An EAGLE-3 layout's fed_layers: fed_hf_indices under `release`'s +1 rule (None: the draft names no layers
    and the target's layer count is unknown)."""
    if not (spec.hf_indices or spec.aux_ids) and n_target is None:
        return None, "no layer ids: SGLang's default depends on the target's layer count"
    return fed_hf_indices(draft_cfg, n_target or 0, release.capture_always_plus_one)


def record_eagle_layers(cfg: dict, hf, release, reads_num_aux: bool) -> list[str]:
    """convert, for an EAGLE-3 layout: the trained HF indices recorded in `cfg`'s eagle_config beside the ids
    that make `release` capture them; warnings where no ids do."""
    warnings: list[str] = []
    ec = cfg["eagle_config"]
    ec["use_aux_hidden_state"] = True
    if hf:
        ids, warn = release_aux_ids(hf, release)
        if warn:
            warnings.append(warn)
        ec[AUX_IDS_FIELD] = ids
        ec[HF_INDICES_FIELD] = list(hf)
        if "num_aux_hidden_states" in cfg:
            cfg["num_aux_hidden_states"] = len(hf)
    if not reads_num_aux:  # K = len(layer ids) there
        cfg.pop("num_aux_hidden_states", None)
    return warnings
