"""Supported range and capability flags (no SGLang import needed)."""

from __future__ import annotations

import pytest

from sglang_eagle3_ext import versions
from sglang_eagle3_ext.versions import UnsupportedSGLang, check_supported


@pytest.mark.parametrize(
    "v,ok",
    [
        ("0.5.10", True),
        ("0.5.16", True),
        ("0.5.23", True),
        ("0.5.16.post1", True),
        ("0.5.5", False),
        ("0.5.24", False),
        ("0.6.0", False),
        ("0.4.10", False),
    ],
)
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


def _tree(tmp_path, eagle="", ds="", plugins=False, rc="", fb="", dflash=""):
    root = tmp_path / "sglang"
    for rel, text in [
        ("srt/models/llama_eagle3.py", eagle),
        ("srt/models/deepseek_v2.py", ds),
        ("srt/models/dflash.py", dflash),
        ("srt/runtime_context.py", rc),
        ("srt/model_executor/forward_batch_info.py", fb),
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if plugins:
        (root / "srt/plugins").mkdir(parents=True)
        (root / "srt/plugins/__init__.py").write_text("def load_plugins(): pass")
    return root


def test_flags_from_source_old_style(tmp_path):
    root = _tree(
        tmp_path,
        eagle="self.midlayer = LlamaDecoderLayer(config, 0)",
        ds="            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
        fb="    rids: Optional[List[str]] = None\n",
    )
    c = versions.capabilities_from_source(root, "0.5.10")
    assert c.HAS_MIDLAYER and not c.HAS_LAYERS_LIST and not c.HAS_PLUGINS and c.CAPTURE_ALWAYS_PLUS_ONE
    assert c.HAS_FORWARD_BATCH_RIDS and not c.AUX_PACKED and not c.HAS_DFLASH


def test_flags_from_source_new_style(tmp_path):
    root = _tree(
        tmp_path,
        eagle="self.layers = nn.ModuleList([])\nself.fc_norm = None\nnorm_before_fc",
        ds="if layer_ids and layer_ids[0] == 1:\n    self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
        "else:\n AuxHiddenStatePacker(3)\n    def set_dflash_layers_to_capture(self, layer_ids):",
        plugins=True,
        rc="class SpawnRanks: ...",
        dflash="class DFlashDraftModel(nn.Module):",
    )
    c = versions.capabilities_from_source(root, "0.5.23")
    assert c.HAS_LAYERS_LIST and not c.HAS_MIDLAYER and c.HAS_PLUGINS and c.AUX_PACKED
    assert c.HAS_INPUT_NORM and c.HAS_FC_NORM and c.HAS_RUNTIME_CONTEXT and not c.CAPTURE_ALWAYS_PLUS_ONE
    assert c.HAS_DFLASH


def test_dflash_needs_the_draft_class_and_the_targets_capture(tmp_path):
    """DFlash serves only where the draft class exists and the DeepSeek target can capture its layers."""
    capture = "    def set_dflash_layers_to_capture(self, layer_ids):\n"
    draft = "class DFlashDraftModel(nn.Module):\n"
    for i, (ds, dflash, want) in enumerate([(capture, draft, True), ("", draft, False), (capture, "", False)]):
        root = _tree(tmp_path / str(i), ds=ds, dflash=dflash)
        assert versions.capabilities_from_source(root, "0.5.16").HAS_DFLASH is want, (ds, dflash)


@pytest.mark.parametrize("release", sorted(versions.TESTED_RELEASES))
def test_dflash_since_matches_each_wheel(release, tmp_path):
    """HAS_DFLASH's and DFLASH_IDS_BOUND_BY_MAX's first releases in the offline table are what each release's own
    sources say (the latter: target_layer_ids bounded by max(ids) + 1, not the draft's layer count, from 0.5.18)."""
    import zipfile

    from test_compat import WHEEL_DIRS as dirs  # SGE3_TEST_WHEEL_DIRS, read in one place

    from sglang_eagle3_ext.compat import release as compat

    wheel = compat.find_wheel(release, [*dirs, compat.cache_dir() / "wheels"])
    if wheel is None:
        pytest.skip(f"no SGLang {release} wheel here (compat --sglang {release} --download fetches it)")
    files = ["sglang/srt/models/dflash.py", "sglang/srt/models/deepseek_v2.py"]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path, [n for n in files if n in z.namelist()])
    probed = versions.capabilities_from_source(tmp_path / "sglang", release)
    table = versions.capabilities_for_version(release)
    assert probed.HAS_DFLASH == table.HAS_DFLASH == (release != "0.5.10")
    bound = release not in ("0.5.10", "0.5.14", "0.5.16")
    assert probed.DFLASH_IDS_BOUND_BY_MAX == table.DFLASH_IDS_BOUND_BY_MAX == bound


def test_dflash_patch_rows_are_skipped_on_a_release_without_dflash(monkeypatch):
    """The patch table's DFlash rows require HAS_DFLASH: left out where the release lacks it, never an error."""
    from sglang_eagle3_ext import patching, versions

    dflash_rows = {"draft.dflash_strict_load", "draft.dflash_fc_width_guard"}
    for release, present in (("0.5.10", False), ("0.5.14", True), ("0.5.23", True)):
        monkeypatch.setattr(versions, "capabilities", lambda r=release: versions.capabilities_for_version(r))
        names = {s.name for s in patching.selected({"draft"})}
        assert (dflash_rows <= names) is present and "draft.strict_load" in names, (release, names)


@pytest.mark.sglang
def test_offline_table_matches_installed_release():
    """capabilities_for_version (no source) must agree with the probe of the installed SGLang's source."""
    import dataclasses

    from sglang_eagle3_ext.versions import capabilities, capabilities_for_version

    installed = capabilities()
    assert dataclasses.asdict(capabilities_for_version(installed.version)) == dataclasses.asdict(installed)


@pytest.mark.parametrize(
    "v,midlayer,packed", [("0.5.10", True, False), ("0.5.16", False, False), ("0.5.23", False, True)]
)
def test_offline_table_known_points(v, midlayer, packed):
    c = versions.capabilities_for_version(v)
    assert c.HAS_DFLASH is not midlayer  # DFlash from 0.5.14, the first release without midlayer
    assert (c.HAS_MIDLAYER, c.HAS_LAYERS_LIST, c.AUX_PACKED, c.CAPTURE_ALWAYS_PLUS_ONE) == (
        midlayer,
        not midlayer,
        packed,
        midlayer,
    )


# ---------------------------------------------------------------- the supported range, declared once

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _pyproject_sglang_requirement():
    import tomllib
    from packaging.requirements import Requirement

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sglang"]
    assert len(extra) == 1
    return Requirement(extra[0])


def test_pyproject_sglang_extra_is_the_recommended_release():
    req = _pyproject_sglang_requirement()
    assert req.name == "sglang" and str(req.specifier) == f"=={versions.RECOMMENDED}", (
        f"pyproject.toml's sglang extra must be sglang=={versions.RECOMMENDED} (versions.RECOMMENDED)"
    )
    assert versions.RECOMMENDED in versions.TESTED_RELEASES and versions.in_range(versions.RECOMMENDED)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"SGLang {versions.RECOMMENDED}" in readme, "the README names the recommended release"


# (version, inside the supported range): pre-releases inside count (installed already), MAX's post releases too
RANGE_CASES = [
    ("0.5.9", False),
    ("0.5.10rc1", False),
    ("0.5.10", True),
    ("0.5.10.post1", True),
    ("0.5.16rc2", True),
    ("0.5.16.dev3", True),
    ("0.5.16+cu128", True),
    ("0.5.16.post2+abc", True),
    ("0.5.23", True),
    ("0.5.23.post1", True),
    ("0.5.23.post1.dev0", True),
    ("0.5.24.dev0", False),
    ("0.5.24rc1", False),
    ("0.5.24", False),
    ("0.6.0", False),
    ("1!0.5.16", False),
]


@pytest.mark.parametrize("v,inside", RANGE_CASES)
def test_run_time_and_pip_agree_on_pre_post_and_local_versions(v, inside, monkeypatch):
    """pip (with --pre) takes exactly what check_supported then accepts: REQUIREMENT is the range pip reads."""
    from packaging.requirements import Requirement

    monkeypatch.delenv(versions.FORCE_ENV, raising=False)
    pip_ok = Requirement(versions.REQUIREMENT).specifier.contains(v, prereleases=True)
    assert versions.in_range(v) is pip_ok is inside
    if not pip_ok:
        with pytest.raises(UnsupportedSGLang):
            check_supported(v)


def test_not_a_version_is_out_of_range():
    assert versions.in_range("unknown") is False and versions.parse("unknown") == ()
    assert versions.parse("0.5.16rc1") == versions.parse("0.5.16.post2+cu128") == (0, 5, 16)


def test_tested_releases_match_patches_ci_and_readme():

    rel = versions.TESTED_RELEASES
    assert versions.SUPPORTED_MIN in rel and versions.SUPPORTED_MAX in rel and all(versions.in_range(v) for v in rel)
    patch_dirs = {p.name for p in (REPO / "patches").iterdir() if p.is_dir() and p.name[0].isdigit()}
    assert patch_dirs == set(rel)
    import sys

    sys.path.insert(0, str(REPO / "patches"))
    try:
        import make_patches
    finally:
        sys.path.remove(str(REPO / "patches"))
    assert make_patches.RELEASES == rel
    # one lock per release, for that release and the transformers it pins
    for v, tf in rel.items():
        lock = (REPO / "constraints" / f"sglang-{v}.txt").read_text()
        assert f"\nsglang=={v} " in lock and f"\ntransformers=={tf} " in lock, f"constraints/sglang-{v}.txt"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"**{versions.SUPPORTED_MIN} ≤ version ≤ {versions.SUPPORTED_MAX}**" in readme
