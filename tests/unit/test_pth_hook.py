"""The start-up hook's value handling, in fresh interpreters (no SGLang import needed)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("value,enabled", [("1", True), ("yes", True), ("0", False), ("", False), ("off", False)])
def test_value_decides(value, enabled):
    env = {**os.environ, "SGLANG_EAGLE3_EXT": value}
    code = ("import sys; import sglang_eagle3_ext._startup_hook; from sglang_eagle3_ext import _activate;"
            "print(_activate._hooks_registered)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(enabled)
