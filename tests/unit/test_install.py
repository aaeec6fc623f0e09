"""Install: `pip install sglang-eagle3-ext` pulls no torch (it belongs to the SGLang environment), the extras
resolve together (their pins agree with speculators 0.9.0 and with what the supported SGLang releases pin),
and the commands that need no torch run without it while the others say `pip install torch` in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sglang_eagle3_ext import versions

REPO = Path(__file__).resolve().parents[2]
# Requires-Dist of speculators 0.9.0 (its wheel's METADATA) for the packages we also declare; compared with the
# installed distribution below when it is there, so this table cannot drift from the real one.
SPECULATORS = {
    "torch": ">=2.9.0,<=2.14.1",
    "transformers": ">=5.0.0,<=5.19.0",
    "datasets": ">=4.0.0,<=5.1.0",
    "numpy": ">=2.0.0,<=2.5.4",
    "tqdm": ">=4.66.3,<=4.70.1",
    "safetensors": "",
    "huggingface-hub": "",
}
# torch pinned by the oldest and the newest supported SGLang release (their wheels' METADATA)
SGLANG_TORCH = {"0.5.10": "2.9.1", "0.5.23": "2.14.1"}
# what brings or replaces a torch: never a base dependency
TORCH_STACK = {"torch", "torchvision", "torchaudio", "triton", "sglang", "speculators", "accelerate"}
# the stack pip would otherwise resolve to its newest release: every extra must stay inside speculators' range
MUST_NEST = ("torch", "transformers", "datasets")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _reqs(group: str | None = None) -> list[Requirement]:
    proj = _project()
    raw = proj["dependencies"] if group is None else proj["optional-dependencies"][group]
    return [Requirement(r) for r in raw]


def _all_groups() -> dict[str, list[Requirement]]:
    return {"base": _reqs(), **{g: _reqs(g) for g in _project()["optional-dependencies"]}}


def _probes(*specs: SpecifierSet) -> list[Version]:
    """Versions on both sides of every bound of these specifiers (enough to tell simple ranges apart)."""
    out = {Version("0.0.1"), Version("9999")}
    for spec in specs:
        for clause in spec:
            rel = Version(clause.version).release + (0, 0)
            major, minor, micro = rel[:3]
            out |= {
                Version(clause.version),
                Version(f"{major}.{minor}.{micro + 1}"),
                Version(f"{major}.{minor + 1}"),
                Version(f"{major + 1}"),
                Version(f"{clause.version}.post1"),
            }
            if micro:
                out.add(Version(f"{major}.{minor}.{micro - 1}"))
            if minor:
                out.add(Version(f"{major}.{minor - 1}.9999"))
            if major:
                out.add(Version(f"{major - 1}.9999"))
    return sorted(out)


def _nested(inner: SpecifierSet, outer: SpecifierSet) -> list[Version]:
    """Versions `inner` admits that `outer` refuses (empty: inner is inside outer)."""
    return [v for v in _probes(inner, outer) if inner.contains(v) and not outer.contains(v)]


def test_speculators_table_is_its_metadata():
    try:
        reqs = [Requirement(r) for r in metadata.requires("speculators") or ()]
    except metadata.PackageNotFoundError:
        pytest.skip("speculators is not installed: the declared table stands alone")
    if metadata.version("speculators") != "0.9.0":
        pytest.skip(f"speculators {metadata.version('speculators')} installed, the table is 0.9.0's")
    real = {_norm(r.name): str(r.specifier) for r in reqs if not r.marker}
    for name, spec in SPECULATORS.items():
        assert SpecifierSet(real[name]) == SpecifierSet(spec), (name, real[name], spec)


def test_base_dependencies_bring_no_torch():
    base = {_norm(r.name) for r in _reqs()}
    assert not base & TORCH_STACK, f"base dependencies pull a torch: {sorted(base & TORCH_STACK)}"


def test_the_torch_stack_nests_inside_speculators_range():
    bad = []
    for group, reqs in _all_groups().items():
        for r in reqs:
            name = _norm(r.name)
            if name in MUST_NEST:
                outside = _nested(r.specifier, SpecifierSet(SPECULATORS[name]))
                if not r.specifier or outside:
                    bad.append(
                        f"[{group}] {r}: admits {[str(v) for v in outside] or 'any version'}, "
                        f"speculators 0.9.0 wants {name}{SPECULATORS[name]}"
                    )
    assert not bad, "; ".join(bad)


def test_every_shared_pin_has_a_common_version():
    bad = []
    for group, reqs in _all_groups().items():
        for r in reqs:
            theirs = SPECULATORS.get(_norm(r.name))
            if theirs is None:
                continue
            ok = [
                v
                for v in _probes(r.specifier, SpecifierSet(theirs))
                if r.specifier.contains(v) and SpecifierSet(theirs).contains(v)
            ]
            if not ok:
                bad.append(f"[{group}] {r} and speculators' {r.name}{theirs} have no version in common")
    assert not bad, "; ".join(bad)


def test_pins_admit_what_the_supported_sglang_releases_pin():
    for group, reqs in _all_groups().items():
        for r in reqs:
            name = _norm(r.name)
            if name == "transformers":
                for release, tf in versions.TESTED_RELEASES.items():
                    assert r.specifier.contains(tf), f"[{group}] {r} refuses transformers {tf} (SGLang {release})"
            if name == "torch":
                for release, t in SGLANG_TORCH.items():
                    assert r.specifier.contains(t), f"[{group}] {r} refuses torch {t} (SGLang {release})"


def test_extras_needing_torch_declare_one_range():
    torch_pins = {g: str(r.specifier) for g, reqs in _all_groups().items() for r in reqs if _norm(r.name) == "torch"}
    assert {"train", "models", "test"} <= set(torch_pins), torch_pins  # sglang pins its own
    assert len(set(torch_pins.values())) == 1, torch_pins


def test_nesting_check_can_fail():
    assert _nested(SpecifierSet(">=4.45"), SpecifierSet(">=5.0.0,<=5.19.0"))
    assert not _nested(SpecifierSet(">=5.3,<=5.19.0"), SpecifierSet(">=5.0.0,<=5.19.0"))


# ---- without torch --------------------------------------------------------------------------------------
_NO_TORCH = """
import sys
for k in [k for k in sys.modules if k == "torch" or k.startswith("torch.")]:
    del sys.modules[k]
sys.modules["torch"] = None          # `import torch` now fails as it does where torch is not installed
from sglang_eagle3_ext.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _without_torch(*argv, cwd):
    return subprocess.run(
        [sys.executable, "-c", _NO_TORCH, *argv], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    pytest.importorskip("speculators")
    from sglang_eagle3_ext.cli.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft, write_target_config

    d = tmp_path_factory.mktemp("notorch")
    make_speculators_draft(d / "spec")
    write_target_config(d / "target")
    convert(d / "spec", d / "draft", progress=False, log=lambda *a: None)
    return d


def test_check_runs_without_torch(drafts):
    p = _without_torch("check", "draft", "--target", "target", "--sglang", "0.5.16", cwd=drafts)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK" in p.stdout and "Traceback" not in p.stderr


def test_convert_without_torch_says_so_in_one_line(drafts):
    p = _without_torch("convert", "spec", "out", "--sglang", "0.5.16", cwd=drafts)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "pip install torch" in lines[0] and "Traceback" not in p.stderr
    assert not (drafts / "out").exists()
