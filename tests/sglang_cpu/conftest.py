import sys

import pytest


@pytest.fixture(autouse=True)
def _no_dump_left_behind():
    """A test that attached a dump leaves no writer, target or verify capture to the next one."""
    yield
    start = sys.modules.get("sglang_eagle3_ext.in_server.dump.start")
    if start is not None:
        start.reset()
