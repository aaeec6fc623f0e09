"""The one registry of environment variables: one boolean rule, typed values, README tables generated
from it, reads of the environment in few modules, and the start-up/baked routes agreeing on "off"."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext import _activate, envs, static_patch
from sglang_eagle3_ext.patch_table import PATCHES

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "sglang_eagle3_ext"

BOOL_TABLE = [
    ("1", True),
    ("true", True),
    ("TRUE", True),
    (" yes ", True),
    ("On", True),
    ("0", False),
    ("false", False),
    ("No", False),
    ("off", False),
    ("", False),
    ("  ", False),
    ("disable", None),
    ("none", None),
    ("n", None),
    ("y", None),
    ("2", None),
    ("enable", None),
    ("1.0", None),
    ("tru", None),
]


@pytest.mark.parametrize("text,want", BOOL_TABLE)
def test_one_boolean_rule_for_every_boolean_variable(text, want):
    bools = [v.name for v in envs.VARS.values() if v.type == "bool"]
    assert envs.ENABLE in bools and envs.DUMP_COPY_STREAM in bools
    for name in bools:
        if want is None:
            with pytest.raises(envs.EnvError) as e:
                envs.get(name, {name: text})
            assert name in str(e.value) and repr(text) in str(e.value) and "1/true/yes/on" in str(e.value)
        else:
            assert envs.get(name, {name: text}) is want


def test_unset_gives_the_default_and_typed_values():
    assert envs.get(envs.VALUE_SCAN, {}) is True and envs.get(envs.ENABLE, {}) is False
    assert envs.get(envs.DUMP_MAX_PENDING_MB, {}) == 4096
    assert envs.get(envs.DUMP_IO_THREADS, {envs.DUMP_IO_THREADS: " 12 "}) == 12
    assert envs.get(envs.DUMP_IO_THREADS, {envs.DUMP_IO_THREADS: ""}) == 8  # empty = unset
    assert envs.get(envs.DUMP_WRITER, {envs.DUMP_WRITER: " Process"}) == "process"
    assert envs.get(envs.CACHE, {envs.CACHE: "/c"}) == "/c"
    assert envs.get(envs.DUMP_LAYERS, {envs.DUMP_LAYERS: "2,30,58"}) == (2, 30, 58)


@pytest.mark.parametrize("text", ["1_0", "1.5", "١٢", "x", "0", "-3", "8 8"])
def test_integers_are_ascii_digits_within_bounds(text):
    with pytest.raises(envs.EnvError, match=envs.DUMP_IO_THREADS):
        envs.get(envs.DUMP_IO_THREADS, {envs.DUMP_IO_THREADS: text})


def test_choices_name_the_legal_values():
    with pytest.raises(envs.EnvError, match="'thread', 'process'"):
        envs.get(envs.DUMP_WRITER, {envs.DUMP_WRITER: "fork"})


def test_undeclared_names_are_refused():
    with pytest.raises(KeyError, match="envs.py"):
        envs.get("SGLANG_EAGLE3_EXT_NO_SUCH")


def test_problems_lists_every_bad_value():
    bad = envs.problems({envs.ENABLE: "disable", envs.DUMP_WRITER: "fork", envs.DUMP_IO_THREADS: "4"})
    assert len(bad) == 2 and envs.ENABLE in bad[0] and envs.DUMP_WRITER in bad[1]


def test_readme_tables_are_the_registry():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for s in envs.SECTIONS:
        assert f"<!-- envs:{s}:start -->" in text and f"<!-- envs:{s}:end -->" in text
    assert envs.sync_readme(text) == text, (
        "README env tables differ from sglang_eagle3_ext/envs.py: python -m sglang_eagle3_ext.envs --update-readme README.md"
    )
    for name in envs.VARS:
        assert f"`{name}`" in text


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_every_variable_name_in_the_package_is_declared():
    """A string constant that is a whole SGLANG_EAGLE3_EXT* name must be in the registry."""
    names = set()
    for p in PKG.rglob("*.py"):
        for s in _string_constants(p):
            names |= {m for m in re.findall(r"\bSGLANG_EAGLE3_EXT(?:_[A-Z0-9]+)*\b", s) if s.strip() == m}
    assert names - set(envs.VARS) == set()


# Modules that may touch os.environ / os.getenv: the registry, the .pth bootstrap, the launcher's child env.
ENV_READERS = {"envs.py", "_startup/sglang_eagle3_ext.pth", "launch/start.py"}


def test_environment_is_read_in_few_modules():
    readers = set()
    for p in list(PKG.rglob("*.py")) + list(PKG.rglob("*.pth")):
        code = p.read_text(encoding="utf-8")
        if p.suffix == ".py":  # docstrings and comments do not read anything
            code = "\n".join(
                ast.unparse(n)
                for n in ast.parse(code).body
                if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            )
        if re.search(r"\bos\.environ\b|\bgetenv\(|\benviron\.get\(", code):
            readers.add(p.relative_to(PKG).as_posix())
    assert readers - ENV_READERS == set(), "read through sglang_eagle3_ext/envs.py instead"
    assert len(ENV_READERS) <= 4


def test_preset_keys_come_from_the_registry():
    from sglang_eagle3_ext.launch import presets

    for key, var in envs.preset_keys().items():
        assert presets.EXT_KEYS[key] == var
    assert {v for v in presets.EXT_KEYS.values() if v} <= set(envs.VARS)


# ---------------------------------------------------------------- the routes agree on "off"


def _runtime_on(value: str | None, monkeypatch) -> bool | None:
    """What the plugin route (same rule as the .pth hook) decides: True on, False off, None disabled+logged."""
    calls = []
    monkeypatch.setattr(_activate, "startup", lambda: calls.append(1))
    monkeypatch.setattr(_activate, "_disabled_reason", None)
    if value is None:
        monkeypatch.delenv(envs.ENABLE, raising=False)
    else:
        monkeypatch.setenv(envs.ENABLE, value)
    _activate.plugin_entry()
    if _activate.disabled_reason() is not None:
        assert envs.ENABLE in _activate.disabled_reason()
        return None
    return bool(calls)


@pytest.mark.parametrize("text,want", BOOL_TABLE)
def test_baked_and_runtime_routes_agree(text, want, monkeypatch):
    monkeypatch.delenv(envs.DUMP_DIR, raising=False)
    spec = next(s for s in PATCHES if s.feature == "draft")
    runtime = _runtime_on(text, monkeypatch)
    baked = static_patch._enabled(spec)
    assert runtime is (None if want is None else want)
    assert baked is bool(want)  # an illegal value: off, like the runtime route
    # unset: the runtime route does nothing, a baked image keeps its patches (the image opted in)
    assert _runtime_on(None, monkeypatch) is False and static_patch._enabled(spec) is True


@pytest.mark.sglang
@pytest.mark.parametrize("value", ["disable", "none", "n"])
def test_start_up_route_with_an_illegal_value_logs_one_line_and_stays_off(value):
    """A real interpreter with the installed .pth: no raise into `import sglang`, one line, nothing patched."""
    code = (
        "import json, sys\n"
        "try:\n    from sglang.srt.plugins import load_plugins\nexcept ImportError:\n    load_plugins = None\n"
        "load_plugins and load_plugins()                       # the plugin route too (0.5.14+)\n"
        "import sglang.srt.models.llama_eagle3 as m\n"
        "w = hasattr(m.LlamaForCausalLMEagle3.__dict__['load_weights'], '__wrapped__')\n"
        "print(json.dumps({'wrapped': w, 'patching': 'sglang_eagle3_ext.patching' in sys.modules}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    env[envs.ENABLE] = value
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"wrapped": False, "patching": False}
    ours = [ln for ln in p.stderr.splitlines() if "sglang_eagle3_ext" in ln and envs.ENABLE in ln]
    assert len(ours) == 1 and repr(value) in ours[0]


@pytest.mark.sglang
def test_launcher_refuses_an_illegal_value_in_one_line(tmp_path):
    """The launcher checks every declared variable its SGLang processes will see (env and preset) up front."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    env.update({envs.CACHE: str(tmp_path / "cache"), envs.DUMP_WRITER: "fork"})
    p = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3_ext.launch_server", "--preset", "tiny", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=240,
    )
    assert p.returncode == 2, p.stderr[-2000:]
    err = [ln for ln in p.stderr.splitlines() if envs.DUMP_WRITER in ln]
    assert len(err) == 1 and "'fork'" in err[0] and "'thread', 'process'" in err[0] and "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "name,text,want",
    [
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", "0.25", 0.25),
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", "1", 1.0),
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", " ", None),
        ("SGLANG_EAGLE3_EXT_DUMP_MAX_ACCEPT_LEN", "2.5", 2.5),
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", "abc", ValueError),
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", "1.5", ValueError),
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", "nan", ValueError),
        ("SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE", "-0.1", ValueError),
        ("SGLANG_EAGLE3_EXT_DUMP_MAX_ACCEPT_LEN", "0.5", ValueError),
        ("SGLANG_EAGLE3_EXT_DUMP_MAX_ACCEPT_LEN", "inf", ValueError),
    ],
)
def test_float_variables_are_checked_up_front(name, text, want):
    """Numbers with bounds are parsed by the registry, so `problems()` (the CLIs' up-front check) sees them."""
    if want is ValueError:
        with pytest.raises(envs.EnvError):
            envs.get(name, {name: text})
        assert any(name in p for p in envs.problems({name: text}))
    else:
        assert envs.get(name, {name: text}) == want


def test_the_dump_dir_has_one_name():
    """Every module names the dump dir's variable envs.DUMP_DIR: no module-level alias of it (the dump's config,
    the launcher and the patch table each kept one); its preset key is the registry's."""
    import ast
    from pathlib import Path

    root = Path(envs.__file__).parent
    aliases = [
        f"{p.relative_to(root)}: {ast.unparse(n)}"
        for p in sorted(root.rglob("*.py"))
        for n in ast.parse(p.read_text(encoding="utf-8")).body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute) and n.value.attr == "DUMP_DIR"
    ]
    assert aliases == []
    from sglang_eagle3_ext.launch import dump_dir

    assert envs.preset_keys()[dump_dir.PRESET_KEY] == envs.DUMP_DIR
