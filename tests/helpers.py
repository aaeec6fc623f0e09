"""Helpers shared by the test modules of every folder, imported as a plain module (`from helpers import ...`):
tests/ is on sys.path through tests/conftest.py. Fixtures every module may request live in conftest.py; this
module holds functions, and the fixtures a module opts into by importing them."""

from __future__ import annotations

import contextlib

import pytest
import torch

LLAMA = "LlamaForCausalLMEagle3"  # the release's Llama EAGLE-3 draft class


def cosine(a, b):
    """Cosine similarity along the last dim, in float32 (per token, per row)."""
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)


@pytest.fixture(autouse=True)
def _short_samples_allowed(monkeypatch):
    """Autouse where imported: those tests use a few tokens per sample; the warm-up-sized filter has its own test."""
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS", "1")


# ---- real SGLang on CPU -----------------------------------------------------------------------------------


def stub_deepseek_target(n_layers=8):
    """A real DeepseekV2ForCausalLM object without its (GPU-sized) layers: the release's method runs on it."""
    import types

    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    t = DeepseekV2ForCausalLM.__new__(DeepseekV2ForCausalLM)
    torch.nn.Module.__init__(t)
    t.pp_group = types.SimpleNamespace(is_last_rank=True)
    t.config = types.SimpleNamespace(num_hidden_layers=n_layers)
    t.model = types.SimpleNamespace(layers_to_capture=[])
    t.capture_aux_hidden_states = False
    return t


@contextlib.contextmanager
def serving(h, target, draft=None):
    """Publish server args as the scheduler of `target` (+ draft) would see them; restore afterwards."""
    # the path goes in at construction: 0.5.18+ ServerArgs are read-only once resolved
    sa = h.server_args(str(target), speculative_draft_model_path=str(draft) if draft else None)
    h.publish(sa)
    try:
        yield sa
    finally:
        h.publish(h.server_args(str(target)))


def build_draft(draft_dir, arch):
    """The release's draft class `arch` built from the draft's config (no weights loaded)."""
    from sglang.srt.models.registry import ModelRegistry
    from transformers import AutoConfig

    return ModelRegistry.resolve_model_cls([arch])[0](AutoConfig.from_pretrained(draft_dir))


def load_draft(h, draft_dir, target, arch):
    """The draft built and loaded through the release's load_weights, as a server serving `target` loads it."""
    from sglang_eagle3_ext.tiny.llama_draft import sglang_weights_iterator

    model = build_draft(draft_dir, arch)
    with serving(h, target, draft_dir):
        model.load_weights(sglang_weights_iterator(draft_dir))
    return model


def release_with(flag: str, what: str):
    """A module fixture (`has_x = release_with("HAS_X", ARCH)` in the test module): the sglang_cpu handle `ext`
    when its release has the capability `flag`, else the test skipped naming `what`, the class it lacks."""

    @pytest.fixture(scope="module")
    def fixture(ext):
        if not getattr(ext.caps, flag):
            pytest.skip(f"SGLang {ext.version} has no {what}")
        return ext

    return fixture


def target_config(**config):
    """A module fixture (`target_dir = target_config(...)` in the test module): a target's config.json only,
    tiny.llama_draft.write_target_config's of `config`."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        from sglang_eagle3_ext.tiny.llama_draft import write_target_config

        return write_target_config(tmp_path_factory.mktemp("t") / "target", **config)

    return fixture


def checkpoint_tensors(d):
    """The tensors of `d`/model.safetensors."""
    from safetensors.torch import load_file

    return load_file(str(d / "model.safetensors"))


def edited_draft(src, out, **changes):
    """A copy of draft `src` whose config.json is changed by `changes` (the same weights)."""
    import json
    import shutil

    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(changes)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def refusal_line(err: str) -> str:
    """The line a refusal is read from: the last "error:" line (argparse writes its usage before it, a refused
    draft lists its problems after it), else the last line."""
    lines = [x for x in str(err).strip().splitlines() if x.strip()]
    said = [x for x in lines if "error:" in x]
    return (said or lines or [""])[-1]


def assert_names_its_input(err, *inputs) -> None:
    """A refusal names what it refused (the file, flag, URL or key): one of `inputs` is in its line."""
    line = refusal_line(err)
    assert any(str(x) in line for x in inputs if str(x)), f"names none of {inputs}: {line!r}"


def refresh_options(world, out: str, **kw):
    """RefreshOptions of a one-epoch CPU refresh of the refresh world's draft on its dump into world["tmp"] / out."""
    from sglang_eagle3_ext.refresh.run import RefreshOptions

    base = dict(
        dump_dir=str(world["dump"]),
        draft=str(world["draft"]),
        out=str(world["tmp"] / out),
        target=str(world["target"]),
        margin=-1e9,  # accepted whatever it predicts
        min_samples=8,
        heldout_fraction=0.25,
        epochs=1,
        lr=1e-4,
        device="cpu",
        dtype="fp32",
        workers=1,
        train_options={"num_workers": 0, "total_seq_len": 256},
    )
    return RefreshOptions(**{**base, **kw})
