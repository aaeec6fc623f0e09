"""What the tiny draft builders share: random but finite tensors of the shapes the loader's rules expect, written
as a draft folder; and speculators' own draft models, made finite and saved as its `save_pretrained` does."""

from __future__ import annotations

import json
from pathlib import Path

from ..draft.keys import Layout
from ..draft.rules import expected_shapes, spec_from_config
from ..outdir import writing


def random_tensors(cfg: dict, requires: str, seed: int = 0, *, skip=(), fc_norm: bool = False, norm_output=False):
    """(tensors, spec, generator): every tensor the rules expect for `cfg` (the names in `skip` aside) in the
    config's dtype, for a release with the capability `requires`; norms near 1, the rest small; the draft's spec
    and the generator, for the caller's further draws."""
    import torch

    layout = Layout(
        release="offline",
        midlayer=False,
        fc_norm=fc_norm,
        input_norm=False,
        norm_output=norm_output,
        capture_always_plus_one=False,
        flags=frozenset({requires}),
    )
    spec, problems = spec_from_config(cfg, layout)
    assert spec is not None, problems
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, cfg.get("torch_dtype") or "float32")
    out = {}
    for k, shape in expected_shapes(spec).items():
        if k in skip:
            continue
        t = torch.randn(shape, generator=g) * 0.02 if len(shape) > 1 else 1.0 + 0.01 * torch.randn(shape, generator=g)
        out[k] = t.to(dt)
    return out, spec, g


def write_files(out, cfg: dict, tensors: dict, tool: str) -> Path:
    """Write (or rewrite, when `out` is one made here) a draft; a directory of anyone else's is refused."""
    from safetensors.torch import save_file

    with writing(out, tool=tool, flag="out", replace=True) as tmp:
        save_file(
            {k: v.contiguous() for k, v in tensors.items()}, str(tmp / "model.safetensors"), metadata={"format": "pt"}
        )
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    return Path(out)


def speculators_config(algorithm: str, speculative_tokens: int):
    """speculators' SpeculatorsConfig of a tiny draft: greedy proposals of `speculative_tokens`, a DeepSeek-V3
    verifier named by class only."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    return SpeculatorsConfig(
        algorithm=algorithm,
        proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=speculative_tokens)],
        default_proposal_method="greedy",
        verifier=VerifierConfig(name_or_path=None, architectures=["DeepseekV3ForCausalLM"]),
    )


def save_random(model, out, vocab: int, tool: str, dtype=None) -> Path:
    """speculators' draft `model` with random but finite parameters (d2t/t2d, when it has them, a consistent
    hot-token mapping over `vocab`), in `dtype` (None: as built), saved by its save_pretrained into `out`."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            # speculators leaves the verifier's copies (lm_head, embeddings) NaN until loaded: make all finite
            p.copy_(torch.randn_like(p) * 0.02 if p.dim() > 1 else 1.0 + 0.01 * torch.randn_like(p))
        if model.d2t is not None:
            hot = torch.sort(torch.randperm(vocab)[: model.d2t.shape[0]]).values
            model.d2t.copy_(hot - torch.arange(hot.shape[0]))
            model.t2d.zero_()
            model.t2d[hot] = True
    if dtype is not None:
        model = model.to(dtype)
    with writing(out, tool=tool, flag="out", replace=True) as tmp:  # never over a user's dir
        model.save_pretrained(tmp)
    return Path(out)
