"""sglang_eagle3_ext.bench.steps: one iteration's and one admission's cost from a SGLang server's log at
--decode-log-interval 1. The lines are SGLang's own format (the fields read are checked in the installed
release's source), plus an excerpt of a real 0.5.16 EAGLE-3 server log."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _mod():
    from sglang_eagle3_ext.bench import steps as bench_steps

    return bench_steps


def decode_line(run: int, seconds: float, accept: float | None = None, interval: int = 1) -> str:
    """The Decode line SGLang logs after an interval of `seconds` (metrics_reporter.log_decode_stats)."""
    tokens = run * (accept or 1) * interval
    spec = f"accept len: {accept:.2f}, accept rate: {(accept - 1) / 3:.2f}, " if accept else ""
    return (
        f"[2026-12-01 12:50:19] Decode batch, #running-req: {run}, #token: 1419, token usage: 0.02, {spec}"
        f"cuda graph: True, gen throughput (token/s): {tokens / seconds:.2f}, #queue-req: 0"
    )


def prefill_line(new: int) -> str:
    return (
        f"[2026-12-01 12:50:19] Prefill batch, #new-seq: {new}, #new-token: {30 * new}, #cached-token: 0, "
        f"token usage: 0.03, #running-req: 14, #queue-req: 0, #pending-token: 0, cuda graph: False, "
        f"input throughput (token/s): 261.17"
    )


REAL_0_5_16 = """\
[2026-12-01 12:50:20] Decode batch, #running-req: 16, #token: 1238, token usage: 0.02, accept len: 3.95, accept rate: 0.98, cuda graph: True, gen throughput (token/s): 8671.44, #queue-req: 0
[2026-12-01 12:50:20] Decode batch, #running-req: 16, #token: 1558, token usage: 0.02, accept len: 4.00, accept rate: 1.00, cuda graph: True, gen throughput (token/s): 8247.11, #queue-req: 0
[2026-12-01 12:50:20] Decode batch, #running-req: 16, #token: 1878, token usage: 0.03, accept len: 4.00, accept rate: 1.00, cuda graph: True, gen throughput (token/s): 9044.91, #queue-req: 0
[2026-12-01 12:50:20] Prefill batch, #new-seq: 2, #new-token: 81, #cached-token: 0, token usage: 0.03, #running-req: 14, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 1520.11
[2026-12-01 12:50:20] Prefill batch, #new-seq: 1, #new-token: 30, #cached-token: 0, token usage: 0.03, #running-req: 16, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 733.29
[2026-12-01 12:50:20] Decode batch, #running-req: 16, #token: 1674, token usage: 0.03, accept len: 3.85, accept rate: 0.95, cuda graph: True, gen throughput (token/s): 1559.87, #queue-req: 0
"""


def test_the_fields_read_are_in_the_installed_releases_log_format():
    """The f-string fragments bench_steps' patterns rely on, in the source of the installed SGLang's decode and
    prefill log lines (metrics_reporter in 0.5.16, scheduler_metrics_mixin before)."""
    pytest.importorskip("sglang")
    src = ""
    for name in (
        "sglang.srt.managers.scheduler_components.metrics_reporter",
        "sglang.srt.managers.scheduler_metrics_mixin",
    ):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            continue
        if spec and spec.origin:
            src += Path(spec.origin).read_text()
    if not src:
        pytest.skip("the installed SGLang has neither metrics module")
    for fragment in (
        'f"Decode batch',
        "#running-req: {",
        "accept len: {",
        "gen throughput (token/s): {",
        "Prefill batch",
        "#new-seq: {",
    ):
        assert fragment in src, fragment
    mod = _mod()
    for line in (decode_line(16, 0.0075, 4.0), decode_line(16, 0.0036), *REAL_0_5_16.splitlines()[:3]):
        assert int(mod.DECODE.search(line)["run"]) == 16, line
    assert int(mod.PREFILL.search(prefill_line(3))["new"]) == 3


def test_iteration_and_admission_costs():
    log = "\n".join(
        [decode_line(16, 0.0075, 4.0)] * 4
        + [decode_line(16, 0.0080, 4.0)]
        + [prefill_line(1), prefill_line(2), decode_line(16, 0.0075 + 2 * 0.040, 4.0)]  # 2 admissions
        + [decode_line(1, 0.003, 4.0)]  # another workload's batch: not batch 16
        + [prefill_line(16), decode_line(16, 2.0, 4.0)]
    )  # the server waited for requests: left out
    s = _mod().step_summary(log, bs=16)
    assert s["iteration_ms"] == 7.5 and s["iterations"] == 5
    assert s["prefill_batches"] == 2 and s["seqs_per_prefill_batch"] == 1.5
    assert s["admission_ms"] == 40.0
    assert s["admission_share"] == pytest.approx(0.080 / (4 * 0.0075 + 0.008 + 0.0875), abs=1e-3)


def test_target_only_lines_have_no_accept_length():
    log = "\n".join([decode_line(16, 0.0036)] * 3 + [prefill_line(15), decode_line(16, 0.0036 + 0.004)])
    s = _mod().step_summary(log, bs=16)
    assert s["iteration_ms"] == 3.6 and s["admission_ms"] == 4.0


def test_interval_other_than_one():
    log = "\n".join(
        [decode_line(16, 5 * 0.0075, 4.0, interval=5)] * 3
        + [prefill_line(3), decode_line(16, 5 * 0.0075 + 0.050, 4.0, interval=5)]
    )
    s = _mod().step_summary(log, bs=16, interval=5)
    assert s["iteration_ms"] == 7.5 and s["iterations"] == 15 and s["admission_ms"] == 50.0


def test_a_real_log_excerpt():
    """A Kimi-width round trip, EAGLE-3 server, --decode-log-interval 5."""
    s = _mod().step_summary(REAL_0_5_16, bs=16, interval=5)
    assert 7.0 < s["iteration_ms"] < 7.8  # 16 x 4 x 5 tokens at ~8200-9000 tok/s
    # (16 x 3.85 x 5 / 1559.87 s - 5 x 7.4 ms) / 2 prefill batches
    assert s["prefill_batches"] == 2 and 75 < s["admission_ms"] < 85


def test_no_full_batch_is_an_error_naming_the_flag():
    assert "--decode-log-interval" in _mod().step_summary(decode_line(4, 0.005), bs=16)["error"]
