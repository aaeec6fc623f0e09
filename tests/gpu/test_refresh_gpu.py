"""`sglang-eagle3 refresh --swap` on a running EAGLE-3 server (GPU, CUDA graphs on): a weak draft improved from
the traffic it serves, swapped in without a restart. Needs a prepared round trip in $SGE3_RT_DIR
(tests/gpu/test_roundtrip_gpu.py; SGE3_RT_PREPARE_ONLY=1 is enough): its target, its training prompts, its
held-out prompts; the weak draft is test_eval_gpu.py's (made once and kept there).

1. The target alone answers the held-out prompts and the first training prompts (greedy, the reference).
2. The target is served with the weak draft, dumping while it serves; training prompts are sent (the traffic
   the refresh learns from); the weak draft's accept length on them is the figure before.
3. `refresh --swap` runs; once it has selected its samples a client keeps sending the held-out prompts (never
   trained on) until the swap is done and after.
4. Asserted: the refresh accepted its draft and swapped it, no request failed, every output equals the target
   alone's (before, during, after), the accept length on the held-out prompts afterwards is >= 3.5 (it was
   the weak draft's before), the pause is measured; the cursor holds exactly the samples used.
At Kimi width (SGE3_RT_TARGET=kimi) the refresh trains with the round trip's learning rate and the client keeps
16 requests in flight. SGE3_REFRESH_DIR puts the serving dump and the refresh's output elsewhere than the round
trip's folder (another disk: at Kimi width they hold ~20 GB).
Figures: $OUT/refresh.json; one line printed ("refresh [...]").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import knobs
import pytest
from gpu_helpers import LOG_DIR, REPO, activation_env, free_port, sglang_server
from test_dump_gpu import dump_args
from test_eval_gpu import _weak_draft
from test_roundtrip_gpu import KIMI, LR, SPEC_ARGS
from test_swap_gpu import CONCURRENCY, Traffic, _accept, _differs, _one, _pass, _prompts, _served_state, _work

pytestmark = pytest.mark.gpu
N_TRAFFIC = int(knobs.get("SGE3_REFRESH_REQUESTS", "512"))  # training prompts served before the refresh
N_CHECKED = 64  # of them, compared with the target alone
MIN_ACCEPT_AFTER = 3.5  # the refreshed draft, on the held-out prompts


def _reference(work: Path, prompts) -> list:
    with sglang_server(
        dump_args(work / "target"),
        name="refresh_base",
        port=free_port(),
        env=activation_env(work),
        launcher="sglang.launch_server",
    ) as (url, _, _):
        _pass(url, prompts[:CONCURRENCY])
        rows = _pass(url, prompts)
    assert not [r for r in rows if r["error"]], rows
    return [r["ids"] for r in sorted(rows, key=lambda r: r["i"])]


def _serve_traffic(url: str, train) -> list[dict]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(64) as ex:
        return list(ex.map(lambda a: _one(url, *a), enumerate(train)))


def _wait_written(dump: Path, n: int, timeout: float = 180) -> int:
    from sglang_eagle3_ext.dump.manifest import read_manifest

    t0 = time.time()
    while time.time() - t0 < timeout:
        have = len(read_manifest(dump)) if (dump / "manifests").is_dir() else 0
        if have >= n:
            return have
        time.sleep(1.0)
    return have


def _start_refresh(url: str, dump: Path, weak: Path, out: Path, work: Path):
    log = LOG_DIR / "refresh.log"
    cmd = [
        sys.executable,
        "-m",
        "sglang_eagle3_ext",
        "refresh",
        "--dump-dir",
        str(dump),
        "--draft",
        str(weak),
        "--out",
        str(out),
        "--target",
        str(work / "target"),
        "--swap",
        url,
        "--epochs",
        knobs.get("SGE3_REFRESH_EPOCHS", "12"),
        "--lr",
        LR,
        "--loss-impl",
        "eager",
        "--device",
        "cuda",
        "--json",
        str(LOG_DIR / "refresh_report.json"),
    ]
    fh = open(log, "w")
    fh.write(f"$ {' '.join(cmd)}\n")
    fh.flush()
    return subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, text=True), log


def _wait_for(log: Path, words: str, proc, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout and proc.poll() is None:
        if words in log.read_text():
            return
        time.sleep(0.5)
    assert words in log.read_text(), log.read_text()[-3000:]


def _cursor(dump: Path) -> dict:
    """What the dump's refresh cursor holds: samples used (trained on or held out), a refresh still pending, the
    drafts it names as their users (format 2: a journal of `used` entries; format 1: `consumed` ids)."""
    try:
        c = json.loads((dump / "refresh_cursor.json").read_text())
    except (OSError, ValueError) as e:
        return {"consumed": f"unread: {type(e).__name__}: {e}", "pending": None, "drafts": []}
    if "used" in c:
        return {
            "consumed": sum(len(u.get("trained", [])) + len(u.get("heldout", [])) for u in c["used"]),
            "pending": c.get("pending"),
            "drafts": [u.get("draft") for u in c["used"]],
        }
    return {"consumed": len(c.get("consumed", [])), "pending": None, "drafts": []}


def test_refresh_swap_without_restart():
    work = _work()
    heldout = _prompts(work)
    train = [json.loads(x)["input_ids"] for x in (work / "train.jsonl").read_text().splitlines() if x][:N_TRAFFIC]
    ref = _reference(work, heldout + train[:N_CHECKED])
    ref_heldout, ref_train = ref[: len(heldout)], ref[len(heldout) :]
    weak = _weak_draft(work)
    room = Path(knobs.get("SGE3_REFRESH_DIR") or work)
    room.mkdir(parents=True, exist_ok=True)
    dump, out = room / "refresh_dump", room / "refresh_out"
    shutil.rmtree(dump, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    dump.mkdir()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = activation_env(work, SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump))
    serve = [*dump_args(work / "target"), "--speculative-draft-model-path", str(weak), *SPEC_ARGS]
    fig: dict = {
        "target": "kimi" if KIMI else "tiny",
        "weak_draft": str(weak),
        "traffic_requests": len(train),
        "heldout_prompts": len(heldout),
        "concurrency_during": CONCURRENCY,
    }
    with sglang_server(serve, name="refresh_server", port=free_port(), env=env, launcher="sglang.launch_server") as (
        url,
        _,
        _,
    ):
        t = time.time()
        before = _serve_traffic(url, train)
        fig["traffic_s"] = round(time.time() - t, 1)
        fig["written_before_refresh"] = _wait_written(dump, len(train))
        proc, log = _start_refresh(url, dump, weak, out, work)
        _wait_for(log, "selected", proc)  # the refresh has chosen its samples
        t = time.time()
        with Traffic(url, heldout) as tr:
            proc.wait(timeout=1800)
        fig["refresh_rc"], fig["refresh_wall_s"] = proc.returncode, round(time.time() - t, 1)
        after = _pass(url, heldout)
        fig["served_after"] = _served_state(url).get("draft")
    report = LOG_DIR / "refresh_report.json"
    rep = json.loads(report.read_text()) if report.exists() else {}  # none: the refresh failed (its log says)
    cursor = _cursor(dump)
    fig.update(
        report={
            k: rep.get(k)
            for k in (
                "accepted",
                "reason",
                "selected",
                "samples_used",
                "train_samples",
                "heldout_samples",
                "before",
                "after",
                "train_s",
                "seconds",
            )
        },
        swap={k: (rep.get("swap") or {}).get(k) for k in ("ok", "pause_s", "error")},
        accept_before=round(_accept(before), 3),
        accept_after=round(_accept(after), 3),
        requests_during=len(tr.rows),
        failed_requests=len([r for r in tr.rows + before + after if r["error"]]),
        outputs_differ={
            "before": [r["i"] for r in before[:N_CHECKED] if r["ids"] != ref_train[r["i"]]],
            "during": _differs(tr.rows, ref_heldout),
            "after": _differs(after, ref_heldout),
        },
        cursor_consumed=cursor["consumed"],
        cursor_pending=cursor["pending"],
        cursor_drafts=cursor["drafts"],
    )
    (LOG_DIR / "refresh.json").write_text(json.dumps(fig, indent=2, default=str))
    print(
        f"refresh [{fig['target']}]: rc {fig['refresh_rc']}, accepted {rep.get('accepted')}, swap ok "
        f"{fig['swap']['ok']} pause {fig['swap']['pause_s']} s, served accept {fig['accept_before']} -> "
        f"{fig['accept_after']}, predicted {rep.get('before')} -> {rep.get('after')}, {fig['failed_requests']} "
        f"failed of {len(before) + len(tr.rows) + len(after)} ({len(tr.rows)} during), outputs differing "
        f"{fig['outputs_differ']}, cursor {fig['cursor_consumed']} of {rep.get('selected')} selected",
        flush=True,
    )
    print(json.dumps(fig, indent=2, default=str))
    assert fig["refresh_rc"] == 0, log.read_text()[-4000:]
    assert rep.get("accepted") and fig["swap"]["ok"], rep
    assert fig["failed_requests"] == 0, fig
    assert not any(fig["outputs_differ"].values()), fig["outputs_differ"]
    assert fig["accept_after"] >= MIN_ACCEPT_AFTER > fig["accept_before"], fig
    assert fig["swap"]["pause_s"] and fig["served_after"] == rep["draft_after"], fig
    assert fig["cursor_consumed"] == rep["selected"] and not fig["cursor_pending"], fig
