"""What a new EAGLE-3 draft must share with the draft a server already serves to be swapped in without a restart.

A swap writes the new draft into the parameters the server built at start-up (see in_server/draft/swap_tensors.py for why in
place), and the target keeps capturing the hidden states it captures now. So on top of the start-up rules (`check`)
the new draft must be built exactly as the served one (`summary`: every shape, and every config key SGLang's
draft class reads when it builds or runs the draft, keys.py) and be fed the HF indices the target captures.
Plain data in, Problems out: the server (in_server/draft/swap.py) and the client (client.py) judge with the same functions,
the client from the summary the server reports (with the keys the server's release reads).
"""

from __future__ import annotations

import dataclasses

from .. import errors as E
from ..errors import Problem
from ..layers import HF_INDICES_FIELD, fed_hf_indices
from .keys import BASELINE

# DraftSpec fields that shape the built module (aux ids and HF indices are judged by index_problems instead)
SPEC_FIELDS = (
    "layout",
    "arch",
    "hidden",
    "target_hidden",
    "k",
    "n_layers",
    "n_heads",
    "n_kv",
    "head_dim",
    "inter",
    "vocab",
    "draft_vocab",
    "tie",
    "fc_bias",
    "fc_norm",
    "norm_before_fc",
    "use_aux",
    "dims",
)
RESTART = "restart the server with it to serve a draft built otherwise"


def summary(spec, cfg: dict | None, keys=None) -> dict:
    """The parts of a draft that a swap cannot change: its spec's build fields, and the build keys its config sets
    (`keys`: those SGLang's draft class reads, keys.build_keys; `build` holds only the keys the config sets,
    `build_keys` says which were looked at; `build` None: the config is not known, those keys are not judged)."""

    d = dataclasses.asdict(spec)
    keys = list(BASELINE if keys is None else keys)
    out = {"spec": {k: d[k] for k in SPEC_FIELDS}, "build_keys": keys}
    out["build"] = None if cfg is None else {k: cfg[k] for k in keys if k in cfg}
    return out


def served_keys(served: dict) -> list[str]:
    """The build keys a served draft's summary was judged on (a server before `build_keys` reported every key it
    compared in `build`, null when unset)."""
    keys = served.get("build_keys")
    if isinstance(keys, list):
        return keys
    return list(served.get("build") or ())


def structure_problems(new: dict, served: dict, where: str) -> list[Problem]:
    """The new draft's summary against the served one's: one Problem per difference, naming both values."""
    P = []
    for k in SPEC_FIELDS:
        a, b = new["spec"].get(k), served["spec"].get(k)
        if a != b:
            P.append(
                Problem(
                    E.SWAP_MISMATCH,
                    f"{where}: {_name(k)} is {a!r}, the served draft's is {b!r}: a swap "
                    f"loads the new draft into the served one in place, so it must be "
                    f"built the same; {RESTART}",
                    key=k,
                )
            )
    a_build, b_build = new.get("build"), served.get("build")
    if a_build is None or b_build is None:
        return P
    exact = isinstance(served.get("build_keys"), list)  # else a null in `build` stood for an unset key
    for k in served_keys(served):
        a, b = _value(a_build, k, exact), _value(b_build, k, exact)
        if a != b:
            P.append(
                Problem(
                    E.SWAP_MISMATCH,
                    f"{where}: config {k} is {_shown(a)}, the served draft's is "
                    f"{_shown(b)}: SGLang built the served draft's modules (rotary, norms, "
                    f"layers) with it at start-up and a swap only loads weights into them; "
                    f"restart to serve it",
                    key=k,
                )
            )
    return P


_UNSET = ("unset",)


def _value(build: dict, key: str, exact: bool):
    if key not in build or (not exact and build[key] is None):
        return _UNSET
    return ("set", build[key])


def _shown(v) -> str:
    return "unset" if v == _UNSET else repr(v[1])


def _name(field: str) -> str:
    return {
        "k": "K (aux hidden states the fc takes)",
        "draft_vocab": "draft_vocab_size",
        "vocab": "vocab_size",
        "hidden": "hidden_size",
        "target_hidden": "target_hidden_size",
        "inter": "intermediate_size",
        "n_layers": "num_hidden_layers",
        "layout": "the draft layout",
    }.get(field, field)


def index_problems(cfg: dict, captured, target_layers: int, always_plus_one: bool, where: str) -> list[Problem]:
    """The HF indices the new draft would be fed (layers.py's rule) against those the target captures now."""
    fed, why = fed_hf_indices(cfg, target_layers, always_plus_one, where=f"{where}/config.json")
    if list(fed) == list(captured):
        return []
    return [
        Problem(
            E.LAYER_INDEX,
            f"{where}: the draft is fed HF hidden_states{list(fed)} ({why}) but the server's "
            f"target captures {list(captured)}: the captured layers are fixed when the server "
            f"starts; swap in a draft trained on {list(captured)} ({HF_INDICES_FIELD}), or "
            f"{RESTART.replace(' built otherwise', ' on other layers')}",
        )
    ]


def token_map_problems(new_has_d2t: bool, served_has_map: bool, where: str) -> list[Problem]:
    """A server whose draft maps no draft tokens built its draft step without the map: a new map cannot be added."""
    if new_has_d2t and not served_has_map:
        return [
            Problem(
                E.SWAP_MISMATCH,
                f"{where}: the draft maps its tokens to the target's (d2t) but the served "
                f"draft has no such map, so the server drafts without one; {RESTART}",
                key="d2t",
            )
        ]
    return []


def against_served(cfg: dict, spec, served: dict, always_plus_one: bool, has_d2t: bool, where: str) -> list[Problem]:
    """A new draft (its config, spec and whether it has d2t) against the served one as the server reports it:
    `served` = summary() + hf_indices + target_layers + token_map. HF indices are compared when the target's
    captured layers are known (the server reads them from its live target)."""
    P = structure_problems(summary(spec, cfg, served_keys(served)), served, where)
    if served.get("hf_indices") is not None and served.get("target_layers") is not None:
        P += index_problems(cfg, served["hf_indices"], served["target_layers"], always_plus_one, where)
    return P + token_map_problems(has_d2t, bool(served.get("token_map")), where)


def problems_line(problems) -> str:
    """Problems as one line (a reply message, an error line)."""
    return "; ".join(str(p) for p in problems)


# the algorithms whose draft the swap handler replaces (it reaches the EAGLE worker's draft runner only)
SWAPPABLE = ("EAGLE3",)


def algorithm_refusal(served_algorithm: str | None, draft_layout=None) -> str | None:
    """Why the server's algorithm cannot take a swap (draft_layout None), or cannot serve the draft's layout."""
    algo = str(served_algorithm or "").upper()
    if draft_layout is None:
        if algo and algo not in SWAPPABLE:
            return (
                f"the server runs --speculative-algorithm {algo}, whose draft swap replaces only for "
                f"{', '.join(SWAPPABLE)}: restart it with --speculative-draft-model-path NEW_DRAFT; nothing was sent"
            )
        return None
    if algo and draft_layout.ALGORITHM != algo:
        return (
            f"a {draft_layout.LABEL or draft_layout.ARCH} draft is served by --speculative-algorithm "
            f"{draft_layout.ALGORITHM}, the server runs {algo}: restart it with that algorithm and the draft"
        )
    return None
