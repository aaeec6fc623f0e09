"""GPU fixtures (helpers live in gpu_helpers.py, imported by the tests as a plain module)."""

from __future__ import annotations

import knobs
import pytest
from gpu_helpers import BACKENDS, SERVE_BACKEND, backend_missing


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory):
    from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target

    return ensure_tiny_target(knobs.get("SGE3_TINY_DIR") or tmp_path_factory.mktemp("tiny"))


@pytest.fixture(params=BACKENDS)
def attn_backend(request):
    """Each serving test once per attention backend (gpu_helpers.BACKENDS); a backend whose kernels this
    host lacks is skipped with the import error SGLang would hit (FA3 without sgl-kernel's flash_ops)."""
    why = backend_missing(request.param)
    if why:
        pytest.skip(f"attention backend {why}")
    return request.param


@pytest.fixture
def serve_backend():
    """The tests that serve SGE3_SERVE_BACKEND skip, naming the import error, where its kernels are missing."""
    why = backend_missing(SERVE_BACKEND)
    if why:
        pytest.skip(f"attention backend {why}")
    return SERVE_BACKEND
