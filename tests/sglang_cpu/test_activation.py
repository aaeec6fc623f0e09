"""Activation routes in fresh interpreters with the real SGLang: .pth + env, spawn children, plugins, failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.sglang

_EAGLE = "sglang.srt.models.llama_eagle3"


def run_py(code: str, *, enable: bool, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `code` as a script file (spawn children must be able to re-import __main__)."""
    import tempfile

    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    if enable:
        env["SGLANG_EAGLE3_EXT"] = "1"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))
    try:
        return subprocess.run([sys.executable, f.name], env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(f.name)


def last_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


SPAWN_CHILD = f"""
import json, multiprocessing as mp, sys

def child(q):
    import {_EAGLE}                                   # what a TP worker does
    import sglang_eagle3_ext
    q.put(sglang_eagle3_ext.applied_patches())

if __name__ == "__main__":
    mp.set_start_method("spawn")                      # as SGLang does
    q = mp.Queue(); p = mp.Process(target=child, args=(q,)); p.start()
    p.join(240); got = q.get(timeout=5)
    print(json.dumps({{"child": got, "parent_imported_ext": "sglang_eagle3_ext" in sys.modules}}))
"""


def test_env_var_patches_spawned_child():
    out = last_json(run_py(SPAWN_CHILD, enable=True))
    assert "draft.strict_load" in out["child"] and "draft.fc_width_guard" in out["child"]


def test_without_env_var_nothing_is_patched_or_imported():
    code = f"""
    import json, sys
    import {_EAGLE} as m
    pre = "sglang_eagle3_ext" in sys.modules
    print(json.dumps({{"ext_imported": pre,
                       "wrapped": hasattr(m.LlamaForCausalLMEagle3.__dict__["load_weights"], "__wrapped__")}}))
    """
    out = last_json(run_py(code, enable=False))
    assert out == {"ext_imported": False, "wrapped": False}
    out = last_json(run_py(SPAWN_CHILD, enable=False))
    assert out["child"] == [] and out["parent_imported_ext"] is False


def test_env_var_patches_on_import_in_same_process():
    code = f"""
    import json, sys
    assert "sglang_eagle3_ext.patching" not in sys.modules    # .pth registered hooks only, nothing heavy
    import {_EAGLE}
    import sglang_eagle3_ext
    print(json.dumps(sglang_eagle3_ext.applied_patches()))
    """
    assert "draft.strict_load" in last_json(run_py(code, enable=True))


def test_raising_hook_does_not_break_import_and_logs_one_line():
    code = f"""
    import json
    import sglang_eagle3_ext.patching as p
    def boom(spec): raise RuntimeError("injected failure in " + spec.name)
    p.apply_spec = boom
    from sglang_eagle3_ext import _activate
    _activate.startup()
    import {_EAGLE}                                   # must not raise
    import sglang.srt.models.deepseek_v2                # second target module: still quiet
    print(json.dumps({{"reason": _activate.disabled_reason(), "active": p.active()}}))
    """
    proc = run_py(code, enable=False)
    out = last_json(proc)
    assert "injected failure" in out["reason"] and out["active"] == []
    lines = [ln for ln in proc.stderr.splitlines() if "sglang_eagle3_ext disabled" in ln]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "injected failure" in lines[0]


def test_unsupported_release_on_startup_route_disables_quietly():
    code = f"""
    import json
    import sglang_eagle3_ext.versions as v
    v.installed_version = lambda: "0.6.0"
    from sglang_eagle3_ext import _activate
    _activate.startup()
    import {_EAGLE}
    print(json.dumps({{"reason": _activate.disabled_reason()}}))
    """
    proc = run_py(code, enable=False)
    assert "0.5.10..0.5.23" in last_json(proc)["reason"]


def test_explicit_route_fails_loudly_on_unsupported_release():
    code = """
    import sglang_eagle3_ext.versions as v
    v.installed_version = lambda: "0.6.0"
    import sglang_eagle3_ext
    sglang_eagle3_ext.apply()
    """
    proc = run_py(code, enable=False)
    assert proc.returncode != 0 and "UnsupportedSGLang" in proc.stderr and "0.5.10..0.5.23" in proc.stderr


def test_sglang_plugin_entry_point_route():
    from sglang_eagle3_ext.versions import capabilities

    if not capabilities().HAS_PLUGINS:
        pytest.skip("this SGLang release has no plugin system")
    code = f"""
    import json, os
    os.environ["SGLANG_EAGLE3_EXT"] = "1"             # set after start-up: the .pth did nothing
    from sglang.srt.plugins import load_plugins
    load_plugins()                                     # SGLang's own loader runs our entry point
    import {_EAGLE}
    import sglang_eagle3_ext
    print(json.dumps(sglang_eagle3_ext.applied_patches()))
    """
    assert "draft.strict_load" in last_json(run_py(code, enable=False))


def test_pth_is_installed_and_cheap():
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    found = [
        os.path.join(d, "sglang_eagle3_ext.pth")
        for d in dirs
        if os.path.exists(os.path.join(d, "sglang_eagle3_ext.pth"))
    ]
    assert found, f"sglang_eagle3_ext.pth not in {dirs}: install the package (pip install .)"
    text = open(found[0]).read().strip()
    assert text.startswith("import os;") and text.count("\n") == 0 and '"SGLANG_EAGLE3_EXT" in os.environ' in text
