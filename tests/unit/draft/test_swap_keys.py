"""Which config keys a swap compares: read off the release's draft class statically (draft/swap/keys.py). On a
source tree of the shapes SGLang's draft classes take (a class named as its base, super().__init__, a config
passed by keyword, aliased by deepcopy, stored on self and read by a later method, handed to a helper function),
every read is found and nothing that is not a read of the config is taken for one."""

from __future__ import annotations

import textwrap

import pytest

from sglang_eagle3_ext.draft.swap import keys as swap_keys

BASE = """
    def make_rope(cfg, dim):
        return cfg.rope_theta, dim.never_config


    class Attn:
        def __init__(self, hidden, config=None, layer_id=0):
            self.rotary = make_rope(config, hidden)
            self.neox = getattr(config, "rope_is_neox_style", True)


    class Decoder:
        def __init__(self, config, layer_id=0):
            self.attn = Attn(config.hidden_size, config=config)
            self.eps = config.rms_norm_eps

        def forward(self, x):
            return x.not_a_config_key
"""
DRAFT = """
    import copy

    from sglang.srt.models.base import Decoder
    from .base import Attn as A


    class Decoder(Decoder):
        def __init__(self, config, layer_id=0):
            super().__init__(config, layer_id)
            self.partial = hasattr(config, "partial_rotary_factor")


    class Logits:
        def __init__(self, config):
            self.cfg = config

        def go(self):
            return self.cfg.final_logit_softcapping


    class Draft:
        def __init__(self, config, quant_config=None):
            self.config = config
            c = copy.deepcopy(config)
            self.layers = [Decoder(c, 0)]
            self.logits = Logits(c)
            config.draft_vocab_size = 3
            self.q = quant_config.weight_block

        def forward(self):
            return self.config.norm_output

        def load_weights(self, weights):
            return weights.keys()
"""


@pytest.fixture
def tree(tmp_path):
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for d in (tmp_path / "sglang", tmp_path / "sglang" / "srt", models):
        (d / "__init__.py").write_text("")
    (models / "base.py").write_text(textwrap.dedent(BASE))
    (models / "draft.py").write_text(textwrap.dedent(DRAFT))
    return tmp_path / "sglang"


def test_every_read_of_the_config_is_found_and_nothing_else(tree):
    found = swap_keys.config_reads(tree, "sglang.srt.models.draft:Draft")
    assert found == {
        "rope_theta",
        "rope_is_neox_style",
        "rms_norm_eps",
        "hidden_size",
        "partial_rotary_factor",
        "final_logit_softcapping",
        "norm_output",
    }


def test_a_class_not_in_the_source_gives_the_known_keys(tree, monkeypatch):
    monkeypatch.setattr(swap_keys, "sglang_root", lambda: tree)
    swap_keys._build_keys.cache_clear()
    try:
        assert swap_keys.config_reads(tree, "sglang.srt.models.draft:Gone") == set()
        assert swap_keys._build_keys("sglang.srt.models.draft:Gone", ()) == tuple(sorted(swap_keys.BASELINE))
        keys = swap_keys._build_keys("sglang.srt.models.draft:Draft", ())
        assert "final_logit_softcapping" in keys and "rope_interleave" in keys  # found, and the baseline
        assert "hidden_size" not in keys  # the spec judges it
    finally:
        swap_keys._build_keys.cache_clear()


def test_unparsable_or_cyclic_source_ends(tree):
    (tree / "srt" / "models" / "cyc.py").write_text(
        textwrap.dedent("""
        from sglang.srt.models.cyc import B as A


        class B(A):
            def __init__(self, config):
                super().__init__(config)
                self.x = B(config).y + config.rope_theta
    """)
    )
    (tree / "srt" / "models" / "bad.py").write_text("class Broken(:\n")
    assert swap_keys.config_reads(tree, "sglang.srt.models.cyc:B") == {"rope_theta"}
    assert swap_keys.config_reads(tree, "sglang.srt.models.bad:Broken") == set()
