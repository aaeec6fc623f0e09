"""Pre-upgrade check (`python -m sglang_eagle3_ext.compat`), the static patches and the patches/ tools,
on CPU without importing SGLang: against an unpacked copy of the SGLang 0.5.16 source (the installed
release when it is 0.5.16, else its wheel), pristine and with a patch target deliberately renamed."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_eagle3_ext import static_patch
from sglang_eagle3_ext.cli import compat as compat_cli
from sglang_eagle3_ext.compat import release as compat
from sglang_eagle3_ext.patch_table import PATCHES

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "patches"))
import compat_matrix  # noqa: E402
import make_patches  # noqa: E402

V = "0.5.16"
CAPTURE = "sglang.srt.models.deepseek_v2:DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
WHEEL_DIRS = [d for d in os.environ.get("SGE3_TEST_WHEEL_DIRS", "/work/wheels").split(os.pathsep) if d]


def _installed_0516() -> Path | None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    return root if compat.version_from_source(root) == V or _meta_version() == V else None


def _meta_version():
    try:
        import importlib.metadata as m

        return m.version("sglang")
    except Exception:  # noqa: BLE001
        return None


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    """A read-only-by-convention unpacked SGLang 0.5.16 tree: <dir>/sglang/..."""
    dest = tmp_path_factory.mktemp("sglang_0516")
    wheel = compat.find_wheel(V, [*WHEEL_DIRS, compat.cache_dir() / "wheels"])
    if wheel is not None:
        compat.unpack_wheel(wheel, dest)
        return dest
    inst = _installed_0516()
    if inst is not None:
        shutil.copytree(
            inst, dest / "sglang", ignore=shutil.ignore_patterns("__pycache__", "*.so"), copy_function=os.symlink
        )
        return dest
    pytest.skip(f"no SGLang {V} source here (no wheel in {WHEEL_DIRS}, not installed)")


def _copy_with(pristine: Path, tmp: Path, rel: str, old: str, new: str) -> Path:
    """Symlink copy of the tree with one file replaced by an edited copy."""
    dst = tmp / "src"
    shutil.copytree(pristine, dst, copy_function=os.symlink)
    f = dst / rel
    text = f.read_text()
    assert old in text, (rel, old)
    f.unlink()
    f.write_text(text.replace(old, new))
    return dst


@pytest.fixture
def renamed(pristine, tmp_path) -> Path:
    return _copy_with(
        pristine,
        tmp_path,
        "sglang/srt/models/deepseek_v2.py",
        "def set_eagle3_layers_to_capture(",
        "def set_eagle3_layers_to_capture_renamed(",
    )


def test_compat_passes_on_pristine_release(pristine, capsys):
    assert compat_cli.main(["--sglang", V, "--source", str(pristine)]) == 0
    out = capsys.readouterr().out
    assert f"supported: sglang {V}: all {len(PATCHES)} patches apply" in out
    for spec in PATCHES:
        assert spec.name in out
    assert "HAS_LAYERS_LIST=on" in out


def test_compat_reads_version_from_the_tree(pristine, capsys):
    assert compat_cli.main(["--source", str(pristine / "sglang")]) == 0
    assert f"sglang {V}" in capsys.readouterr().out


def test_renamed_method_fails_compat_with_target_name(renamed, capsys):
    assert compat_cli.main(["--sglang", V, "--source", str(renamed)]) == 1
    out = capsys.readouterr().out
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("unsupported: ") and CAPTURE in verdict
    assert "moved" in verdict
    # only that one target is reported
    assert sum(s.target in verdict for s in PATCHES) == 1


def test_renamed_method_fails_make_patches_and_matrix_with_target_name(renamed, tmp_path, monkeypatch):
    with pytest.raises(make_patches.PatchGenError, match="set_eagle3_layers_to_capture"):
        make_patches.render(renamed, V)
    # the matrix's patch cell, fed a wheel of the broken tree
    whl = tmp_path / "wheels" / f"sglang-{V}-py3-none-any.whl"
    whl.parent.mkdir()
    with zipfile.ZipFile(whl, "w") as z:
        for rel in (
            "version.py",
            "srt/models/llama_eagle3.py",
            "srt/models/deepseek_v2.py",
            "srt/layers/logits_processor.py",
            "srt/model_executor/forward_batch_info.py",
        ):
            z.write(renamed / "sglang" / rel, f"sglang/{rel}")
    monkeypatch.setenv(compat.CACHE_ENV, str(tmp_path / "cache"))
    res: dict = {}
    compat_matrix.cell_patch(V, whl, res)
    assert res["patch"][0] == "FAIL"
    assert CAPTURE in res["patch"][1]
    assert compat_matrix.failures([{"release": V, **{c: res.get(c, ("ok", "")) for c in compat_matrix.COLUMNS}}])


def test_moved_class_names_where_it_went(pristine, tmp_path, capsys):
    src = _copy_with(
        pristine,
        tmp_path,
        "sglang/srt/layers/logits_processor.py",
        "class LogitsProcessor(",
        "class LogitsProcessorV2(",
    )
    assert compat_cli.main(["--sglang", V, "--source", str(src)]) == 1
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert "sglang.srt.layers.logits_processor:LogitsProcessor.forward" in verdict
    assert "class LogitsProcessor not in sglang.srt.layers.logits_processor" in verdict


def test_renamed_parameter_fails_compat_with_its_name(pristine, tmp_path, capsys):
    """The wrappers read SGLang's arguments by name (PatchSpec.params): a renamed one is a moved target."""
    src = _copy_with(
        pristine,
        tmp_path,
        "sglang/srt/models/llama_eagle3.py",
        "def load_weights(self, weights:",
        "def load_weights(self, checkpoint_weights:",
    )
    assert compat_cli.main(["--sglang", V, "--source", str(src)]) == 1
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert "LlamaForCausalLMEagle3.load_weights" in verdict and "param weights gone" in verdict


@pytest.mark.parametrize("version", ["0.5.5", "0.6.0"])
def test_release_outside_range_is_unsupported(pristine, version, capsys):
    assert compat_cli.main(["--sglang", version, "--source", str(pristine)]) == 1
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert verdict.startswith("unsupported: ") and "outside the supported range" in verdict


def test_unavailable_release_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(compat.CACHE_ENV, str(tmp_path))
    assert compat_cli.main(["--sglang", "0.0.1"]) == 2
    assert "add --download" in capsys.readouterr().err


def test_json_output(pristine, capsys):
    import json

    assert compat_cli.main(["--sglang", V, "--source", str(pristine), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["supported"] and {p["name"] for p in d["patches"]} == {s.name for s in PATCHES}


def test_committed_patch_is_current_and_applies(pristine, tmp_path):
    import subprocess

    committed = make_patches.patch_path(V).read_text()
    assert make_patches.render(pristine, V) == committed
    files = sorted({ln[6:] for ln in committed.splitlines() if ln.startswith("+++ b/")})
    from sglang_eagle3_ext.versions import capabilities_from_source

    caps = capabilities_from_source(pristine / "sglang", V)  # one patched file per SGLang module the table patches here
    assert len(files) == len({s.module for s in PATCHES if not s.requires or getattr(caps, s.requires)})
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(pristine / rel, tmp_path / rel)
    p = subprocess.run(
        ["patch", "-p1", "--batch", "-d", str(tmp_path), "-i", str(make_patches.patch_path(V))],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    for rel in files:
        compile((tmp_path / rel).read_text(), rel, "exec")
    text = (tmp_path / "sglang/srt/models/llama_eagle3.py").read_text()
    assert '    @sglang_eagle3_ext.static_patch.patched("draft.strict_load")\n    def load_weights(' in text


def test_edit_source_puts_decorator_outermost_and_import_after_future():
    import ast

    src = (
        '"""doc"""\nfrom __future__ import annotations\n\nimport os\n\n\nclass A:\n'
        "    @staticmethod\n    def f():\n        pass\n"
    )
    node = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef))
    out = make_patches.edit_source(src, [("draft.strict_load", node)])
    assert out.splitlines()[3].startswith("import sglang_eagle3_ext.static_patch")
    assert out.splitlines()[4] == "import os"
    assert '    @sglang_eagle3_ext.static_patch.patched("draft.strict_load")\n    @staticmethod\n' in out
    with pytest.raises(make_patches.PatchGenError, match="already"):
        make_patches.edit_source(out, [])


# ------------------------------------------------------------------ static_patch (no SGLang needed)


def _fn(self, x):
    return x


def _named(spec):
    """A function whose __qualname__ is the target's (as in the class body the diff decorates)."""

    def f(self, x):
        return x

    f.__qualname__ = spec.target.partition(":")[2]
    return f


def test_static_patch_uses_the_runtime_wrapper_and_mark(monkeypatch):
    wrapt = pytest.importorskip("wrapt")
    from sglang_eagle3_ext import patching

    monkeypatch.delenv("SGLANG_EAGLE3_EXT", raising=False)
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_DIR", "/nonexistent")
    for spec in PATCHES:
        f = _named(spec)
        fw = static_patch.patched(spec.name)(f)
        assert isinstance(fw, wrapt.FunctionWrapper)
        assert fw._self_wrapper is patching.import_string(spec.wrapper)
        assert getattr(fw, patching.PATCH_MARK) == spec.name
        assert fw.__wrapped__ is f


def test_static_patch_respects_features_and_off_switch(monkeypatch):
    monkeypatch.delenv("SGLANG_EAGLE3_EXT_DUMP_DIR", raising=False)
    monkeypatch.delenv("SGLANG_EAGLE3_EXT", raising=False)
    by = {s.name: s for s in PATCHES}
    f, g = _named(by["dump.prefill_hook"]), _named(by["draft.strict_load"])
    assert static_patch.patched("dump.prefill_hook")(f) is f  # dump off without a dump dir
    assert static_patch.patched("draft.strict_load")(g) is not g
    monkeypatch.setenv("SGLANG_EAGLE3_EXT", "0")
    assert static_patch.patched("draft.strict_load")(g) is g  # explicit off
    with pytest.raises(RuntimeError, match="no_such_patch"):
        static_patch.patched("no_such_patch")


def test_runtime_apply_sees_baked_patch_as_applied(monkeypatch):
    pytest.importorskip("wrapt")
    from sglang_eagle3_ext import patching
    from sglang_eagle3_ext.patch_table import PatchSpec

    monkeypatch.delenv("SGLANG_EAGLE3_EXT", raising=False)
    mod = type(sys)("sge3_fake_target")

    class LlamaForCausalLMEagle3:
        def load_weights(self, weights):
            return weights

        load_weights.__qualname__ = "LlamaForCausalLMEagle3.load_weights"
        load_weights = static_patch.patched("draft.strict_load")(load_weights)

    mod.LlamaForCausalLMEagle3 = LlamaForCausalLMEagle3
    monkeypatch.setitem(sys.modules, "sge3_fake_target", mod)
    spec = PatchSpec(
        "draft.strict_load",
        "sge3_fake_target:LlamaForCausalLMEagle3.load_weights",
        PATCHES[0].hook,
        "test",
        feature="draft",
    )
    baked = LlamaForCausalLMEagle3.__dict__["load_weights"]
    assert patching.apply_spec(spec) is False
    assert LlamaForCausalLMEagle3.__dict__["load_weights"] is baked


def test_static_patch_refuses_the_wrong_function():
    """A diff applied to another release with fuzz could land on a neighbouring def: the import fails."""
    with pytest.raises(RuntimeError, match="expected 'LlamaForCausalLMEagle3.load_weights'"):
        static_patch.patched("draft.strict_load")(_fn)


def test_update_readme_writes_between_markers_only(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"head\n{compat_matrix.START}\nold\n{compat_matrix.END}\ntail\n")
    res = {"release": V, "transformers": "5.12.1", "seconds": 1.0, **{c: ("ok", "") for c in compat_matrix.COLUMNS}}
    bad = dict(res, release="0.5.18", install=("FAIL", "no wheel"))
    compat_matrix.update_readme([res, bad], 60, readme)
    text = readme.read_text()
    assert text.startswith("head\n") and text.endswith("tail\n") and "old" not in text
    assert f"| {V} | 5.12.1 | ✅" in text and "| 0.5.18 | 5.12.1 | ❌" in text and "0.5.18 install: no wheel" in text


def test_a_release_without_dflash_is_a_dash_not_a_failure():
    """The DFLASH column of a release that has no DFLASH (every test skipped) is n/a: a dash, the row still ok;
    a DFLASH failure on a release that has it fails the row."""
    row = {
        "release": "0.5.10",
        "transformers": "5.3.0",
        "seconds": 1.0,
        **{c: ("ok", "") for c in compat_matrix.COLUMNS},
    }
    na = dict(row, dflash=("n/a", "skipped: no DFLASH in SGLang 0.5.10"))
    assert compat_matrix.ok(na) and compat_matrix.failures([na]) == []
    assert compat_matrix.table([na]).splitlines()[-1].split(" | ")[-2] == "—"
    bad = dict(row, release=V, dflash=("FAIL", "1/2 passed"))
    assert not compat_matrix.ok(bad) and compat_matrix.failures([bad]) == [f"{V} dflash: 1/2 passed"]
