"""Supported range and capability flags (no SGLang import needed)."""
from __future__ import annotations

import pytest

from sglang_eagle3_ext import versions
from sglang_eagle3_ext.versions import UnsupportedSGLang, check_supported


@pytest.mark.parametrize("v,ok", [("0.5.10", True), ("0.5.16", True), ("0.5.23", True), ("0.5.16.post1", True),
                                  ("0.5.5", False), ("0.5.24", False), ("0.6.0", False), ("0.4.10", False)])
def test_range(v, ok, monkeypatch):
    monkeypatch.delenv(versions.FORCE_ENV, raising=False)
    if ok:
        assert check_supported(v) == v
    else:
        with pytest.raises(UnsupportedSGLang) as ei:
            check_supported(v)
        msg = str(ei.value)
        assert "0.5.10..0.5.23" in msg and versions.FORCE_ENV in msg and "\n" not in msg


def test_force_override(monkeypatch):
    monkeypatch.setenv(versions.FORCE_ENV, "1")
    assert check_supported("0.6.0") == "0.6.0"


def _tree(tmp_path, eagle="", ds="", plugins=False, rc="", fb=""):
    root = tmp_path / "sglang"
    for rel, text in [("srt/models/llama_eagle3.py", eagle), ("srt/models/deepseek_v2.py", ds),
                      ("srt/runtime_context.py", rc), ("srt/model_executor/forward_batch_info.py", fb),
                      ("srt/models/registry.py", "SGLANG_EXTERNAL_MODEL_PACKAGE")]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if plugins:
        (root / "srt/plugins").mkdir(parents=True)
        (root / "srt/plugins/__init__.py").write_text("def load_plugins(): pass")
    return root


def test_flags_from_source_old_style(tmp_path):
    root = _tree(tmp_path, eagle="self.midlayer = LlamaDecoderLayer(config, 0)",
                 ds="            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
                 fb="    rids: Optional[List[str]] = None\n")
    c = versions.capabilities_from_source(root, "0.5.10")
    assert c.HAS_MIDLAYER and not c.HAS_LAYERS_LIST and not c.HAS_PLUGINS and c.CAPTURE_ALWAYS_PLUS_ONE
    assert c.HAS_FORWARD_BATCH_RIDS and not c.AUX_PACKED


def test_flags_from_source_new_style(tmp_path):
    root = _tree(tmp_path, eagle="self.layers = nn.ModuleList([])\nself.fc_norm = None\nnorm_before_fc",
                 ds="if layer_ids and layer_ids[0] == 1:\n    self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
                    "else:\n AuxHiddenStatePacker(3)", plugins=True, rc="class SpawnRanks: ...")
    c = versions.capabilities_from_source(root, "0.5.23")
    assert c.HAS_LAYERS_LIST and not c.HAS_MIDLAYER and c.HAS_PLUGINS and c.AUX_PACKED
    assert c.HAS_INPUT_NORM and c.HAS_FC_NORM and c.HAS_RUNTIME_CONTEXT and not c.CAPTURE_ALWAYS_PLUS_ONE


@pytest.mark.sglang
def test_offline_table_matches_installed_release():
    """capabilities_for_version (no source) must agree with the probe of the installed SGLang's source."""
    import dataclasses

    from sglang_eagle3_ext.versions import capabilities, capabilities_for_version

    installed = capabilities()
    assert dataclasses.asdict(capabilities_for_version(installed.version)) == dataclasses.asdict(installed)


@pytest.mark.parametrize("v,midlayer,packed", [("0.5.10", True, False), ("0.5.16", False, False), ("0.5.23", False, True)])
def test_offline_table_known_points(v, midlayer, packed):
    c = versions.capabilities_for_version(v)
    assert (c.HAS_MIDLAYER, c.HAS_LAYERS_LIST, c.AUX_PACKED, c.CAPTURE_ALWAYS_PLUS_ONE) == (midlayer, not midlayer, packed, midlayer)
