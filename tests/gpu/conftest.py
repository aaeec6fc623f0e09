"""GPU fixtures (helpers live in gpu_helpers.py, imported by the tests as a plain module)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory):
    from sglang_eagle3_ext.tiny import ensure_tiny_target

    return ensure_tiny_target(os.environ.get("SGE3_TINY_DIR") or tmp_path_factory.mktemp("tiny"))
