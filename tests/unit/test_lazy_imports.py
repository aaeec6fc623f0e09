"""Nothing heavy at import time, held once for the whole package: importing any `sglang_eagle3_ext` module pulls
no torch, SGLang, transformers, speculators, safetensors, numpy or datasets (they load inside the functions
that need them), except the modules that are torch code by nature, listed here. A light module that imports a
heavy one at its top fails here too, so the lazy rule needs no repeating in every module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sglang", "transformers", "speculators", "safetensors", "numpy", "datasets")
# torch networks and the loops that run them: imported only by the functions that train or simulate
TORCH_BY_NATURE = {
    "sglang_eagle3_ext.draft.nets.common",
    "sglang_eagle3_ext.draft.arch.llama.net",
    "sglang_eagle3_ext.draft.arch.mla.net",
    "sglang_eagle3_ext.draft.arch.dflash.net",
    "sglang_eagle3_ext.acceptance.simulate",
    "sglang_eagle3_ext.acceptance.block",
    "sglang_eagle3_ext.acceptance.by_steps",
    "sglang_eagle3_ext.training.mla.loop",
    "sglang_eagle3_ext.training.mla.train",
    "sglang_eagle3_ext.training.workers",
}

PROBE = r"""
import importlib, json, pkgutil, sys
HEAVY = set(sys.argv[1].split(","))
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"imports {name} at import time")
sys.meta_path.insert(0, Refuse())
import sglang_eagle3_ext as pkg
heavy = {}
for m in pkgutil.walk_packages(pkg.__path__, "sglang_eagle3_ext."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except ImportError as e:
        heavy[m.name] = str(e)
print(json.dumps(heavy))
"""


def _heavy_at_import() -> dict:
    p = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_no_module_imports_a_heavy_library_at_import_time():
    heavy = _heavy_at_import()
    unexpected = {m: why for m, why in heavy.items() if m not in TORCH_BY_NATURE}
    assert not unexpected, unexpected
    stale = TORCH_BY_NATURE - set(heavy)
    assert not stale, f"light now (or gone): drop from TORCH_BY_NATURE: {sorted(stale)}"


def test_the_package_and_every_command_module_load_light():
    code = (
        "import sys, sglang_eagle3_ext, sglang_eagle3_ext.cli\n"
        "from sglang_eagle3_ext.cli.commands import COMMANDS\n"
        "import importlib\n"
        "for c in COMMANDS: importlib.import_module('sglang_eagle3_ext.' + c.main.split(':')[0])\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]", p.stdout[-2000:]
