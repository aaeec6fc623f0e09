"""`sglang-eagle3 launch --dry-run` refuses SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB above this machine's memory
(the writer pins that much at start-up), as the launch itself would; a budget that fits passes. Real SGLang
0.5.16 for the argument parser; nothing is served."""

from __future__ import annotations

import pytest
from test_launch_hardware import launch

from sglang_eagle3_ext.dump.config import host_memory_bytes

pytestmark = pytest.mark.sglang
VAR = "SGLANG_EAGLE3_EXT_DUMP_MAX_PENDING_MB"


@pytest.mark.parametrize("times", [2, 1000])
def test_a_pending_budget_above_the_machine_memory_is_refused_naming_it(tmp_path, times):
    mb = (host_memory_bytes() >> 20) * times
    rc, out, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", str(tmp_path / "d"), env={VAR: str(mb)})
    assert rc == 2 and VAR in err and str(mb) in err, (out, err)


def test_a_pending_budget_that_fits_passes(tmp_path):
    rc, out, err = launch(tmp_path, "--preset", "tiny", "--dump-dir", str(tmp_path / "d"), env={VAR: "64"})
    assert rc == 0, err
