"""`sglang-eagle3 eval` against real serving (GPU): the accept length predicted offline beside the one SGLang
reports on the same held-out prompts, for drafts of every quality. Needs a prepared round trip in $SGE3_RT_DIR
(tests/gpu/test_roundtrip_gpu.py; SGE3_RT_PREPARE_ONLY=1 is enough; same SGE3_RT_TARGET / SGE3_RT_BACKEND):
its target, its speculators export `hs/` and its trained draft. SGE3_RT_SPEC_STEPS picks the servers'
--speculative-num-steps (run once per value; topk 1, steps + 1 draft tokens).

Drafts, in the order they are served (the best-informed first):
- `roundtrip`: the round trip's trained draft;
- `blind20`, `blind50` (middling quality): the same draft blind to a random 20 % / 50 % of the vocabulary (the
  lm_head rows of those tokens zeroed, so it never proposes them): wherever the target's next token is one of them
  the round is cut there, elsewhere the draft is as good as before. The walk of tiny.PREDICTABLE visits the
  vocabulary evenly, so each position accepts about (1 - share) x the trained draft's rate: accept lengths
  between 1.5 and 3.5 at 3 and at 5 steps, made in seconds from the one preparation;
- `weak`: the round trip's recipe stopped after WEAK_STEPS optimizer steps (served accept ~1);
- `epoch<k>` for each k in SGE3_EVAL_EPOCHS: the round trip's recipe (TRAIN_ARGS) stopped after k epochs
  (SGLANG_EAGLE3_EXT_TRAIN_STOP_AFTER_EPOCHS), an early checkpoint of the same training; left out, said in the
  results, where the disk lacks room for its training checkpoint;
- on the tiny target also `one_epoch` (the recipe run for one epoch);
- with $SGE3_KIMI_RT_DIR, test_kimi_wrapper_mla_draft_predicted: the Kimi-K2.5 wrapper's MLA draft.
Drafts are made once and kept in $SGE3_RT_DIR, one at a time across the jobs sharing it (a lock): the eval jobs
at two step counts and the swap and refresh tests (which start from `weak`) ask for them side by side, and a
background thread makes the later ones while the first is served.

Each draft gets a server of its own (EAGLE-3, topk 1, CUDA graphs on), which serves nothing but eval's requests:
`eval --url` simulates the held-out split `train` kept out of `hs/` and sends the same prompts to the server.
SGLang's own figure is /get_server_info's avg_spec_accept_length after the run (its lifetime counts: accepted drafts
+ 1 per verify round, as its log's "accept len" and the sglang:spec_accept_length metric), with the same count
from the replies' per-request histograms beside it. It can fail: |predicted - SGLang's figure| <= TOLERANCE for
every draft, and per position P(a round accepts >= k drafts) within POSITION_TOLERANCE. Written as each draft is
done: $OUT/eval_<draft>_s<steps>.json (eval's report), $OUT/eval_predicted_vs_served_<target>_s<steps>.json (the
table so far); one line per draft printed ("eval [...]").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import knobs
import pytest
from gpu_helpers import LOG_DIR, REPO, activation_env, free_port, sglang_server
from test_roundtrip_gpu import KIMI, SERVE_ARGS, SPEC_ARGS, SPEC_STEPS, TRAIN_ARGS, _run

pytestmark = pytest.mark.gpu
TOLERANCE = 0.10  # |predicted - SGLang's avg_spec_accept_length|
POSITION_TOLERANCE = 0.05  # |predicted - served| of P(a verify round accepts >= k drafts), every position k
MIDDLING = (1.5, 3.5)  # the served accept lengths that count as middling quality
WEAK_STEPS = 10  # optimizer steps of the weakest draft (the round trip's trains for 8-12 epochs)
BLIND = (0.2, 0.5)  # vocabulary shares the middling drafts cannot propose
EARLY_EPOCHS = [int(e) for e in (knobs.get("SGE3_EVAL_EPOCHS") or "").split(",") if e.strip()]
# an early checkpoint's training writes the model, AdamW's two moments (float32) and the draft: ~14 GB at Kimi width
TRAIN_DISK_GB = 20


def _rt_work() -> Path:
    return (Path(knobs.get("SGE3_RT_DIR") or "/nonexistent") / ("kimi" if KIMI else "")).resolve()


@contextlib.contextmanager
def _making(work: Path):
    """One draft made at a time per round-trip folder, across the processes sharing it: the first to ask makes it,
    the others wait and then find it made."""
    with open(work / ".eval_drafts.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _train(work: Path, spec: Path, name: str, extra: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return _run(
        [
            "sglang_eagle3_ext.train_draft",
            "--data",
            str(work / "hs"),
            "--target",
            str(work / "target"),
            "--out",
            str(spec),
            "--device",
            "cuda",
            "--min-val-acc",
            "0",
            *extra,
        ],
        f"eval_{name}_train",
        env,
        timeout=900,
    )


def _convert(spec: Path, out: Path, name: str) -> Path:
    p = _run(["sglang_eagle3_ext.convert", str(spec), str(out)], f"eval_{name}_convert")
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _weak_draft(work: Path, name: str = "weak", budget: tuple = ("--steps", str(WEAK_STEPS))) -> Path:
    """The round trip's recipe cut short (`budget`: train flags), converted to SGLang's layout; made once per
    round-trip folder (its training output, checkpoint included, removed once converted)."""
    out, spec = work / f"eval_{name}_draft_sglang", work / f"eval_{name}_draft_speculators"
    if (out / "config.json").exists():  # made (folders appear whole)
        return out
    with _making(work):
        if (out / "config.json").exists():
            return out
        if not (spec / "config.json").exists():
            p = _train(work, spec, name, [*budget, "--lr", "3e-3", "--loss-impl", "eager"])
            assert p.returncode == 0, p.stderr[-3000:]
        _convert(spec, out, name)
        shutil.rmtree(spec, ignore_errors=True)
    return out


def _epochs_done(run: Path) -> int:
    try:
        return int(json.loads((run / "checkpoint" / "state.json").read_text())["epochs_done"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _early_draft(work: Path, epoch: int) -> Path | None:
    """The round trip's own recipe (TRAIN_ARGS) stopped after `epoch` epochs: one run in eval_early_train,
    stopped at each asked epoch (SGLANG_EAGLE3_EXT_TRAIN_STOP_AFTER_EPOCHS) and resumed from there (--resume
    continues the same run exactly), each stop converted. None: the disk lacks room for the training checkpoint."""
    out, run = work / f"eval_epoch{epoch}_draft_sglang", work / "eval_early_train"
    if (out / "config.json").exists():  # made (folders appear whole)
        return out
    with _making(work):
        if (out / "config.json").exists():
            return out
        if _epochs_done(run) > epoch:  # the run is past it: a run of its own
            run = work / f"eval_early_train_{epoch}"
        if not run.exists() and shutil.disk_usage(work).free < TRAIN_DISK_GB * 2**30:
            return None
        last = epoch >= int(TRAIN_ARGS[TRAIN_ARGS.index("--epochs") + 1])
        env = None if last else {"SGLANG_EAGLE3_EXT_TRAIN_STOP_AFTER_EPOCHS": str(epoch)}
        p = _train(work, run, f"epoch{epoch}", [*TRAIN_ARGS, "--resume"], env)
        stopped = p.returncode == 2 and f"stopped after epoch {epoch}" in p.stderr
        assert p.returncode == 0 or stopped, p.stderr[-3000:]
        assert _epochs_done(run) == epoch, (epoch, _epochs_done(run), p.stderr[-2000:])
        _convert(run, out, f"epoch{epoch}")
        if last or epoch >= max(EARLY_EPOCHS):
            shutil.rmtree(run, ignore_errors=True)
    return out


def _blind_draft(work: Path, share: float) -> Path:
    """The round trip's draft with the lm_head rows of a random `share` of its vocabulary zeroed (seeded): it
    never proposes those tokens (a zero logit loses to the trained prediction, and where it wins it names a token
    of the zeroed share, which the target's next token is not, unless it is one of them and first in order)."""
    import torch
    from safetensors.torch import load_file, save_file

    good, out = work / "draft_sglang", work / f"eval_blind{round(share * 100)}_draft_sglang"
    if (out / "config.json").exists():  # made (folders appear whole)
        return out
    with _making(work):
        if (out / "config.json").exists():
            return out
        cfg = json.loads((good / "config.json").read_text())
        assert cfg.get("draft_vocab_size"), f"{good}: the draft shares the target's lm_head; nothing to blind"
        tmp = work / f".{out.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        blinded = 0
        for f in sorted(good.iterdir()):
            if f.suffix == ".safetensors":
                t = load_file(str(f))
                if "lm_head.weight" in t:
                    w = t["lm_head.weight"].clone()
                    rows = torch.randperm(w.shape[0], generator=torch.Generator().manual_seed(7))
                    rows = rows[: round(share * w.shape[0])]
                    w[rows] = 0
                    t["lm_head.weight"] = w
                    blinded = len(rows)
                    save_file(t, str(tmp / f.name), metadata={"format": "pt"})
                    continue
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        assert blinded, f"{good}: no lm_head.weight in its safetensors"
        tmp.rename(out)
    return out


def _drafts(work: Path) -> list[tuple[str, callable]]:
    """(name, maker) in the order served; each maker returns the draft's folder (None: left out, said why)."""
    out = [("roundtrip", lambda: work / "draft_sglang")]
    out += [(f"blind{round(s * 100)}", lambda s=s: _blind_draft(work, s)) for s in BLIND]
    out += [("weak", lambda: _weak_draft(work))]
    if not KIMI:
        out += [("one_epoch", lambda: _weak_draft(work, "one_epoch", ("--epochs", "1")))]
    out += [(f"epoch{k}", lambda k=k: _early_draft(work, k)) for k in sorted(EARLY_EPOCHS)]
    return out


def _make_ahead(drafts) -> threading.Thread:
    """Make every draft in the background, in order, while the first ones are served (failures are left for the
    serving loop to meet and report)."""

    def go():
        for _, make in drafts[1:]:
            with contextlib.suppress(BaseException):
                make()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _eval_served(work: Path, name: str, draft: Path, preset: str = "tiny", data: Path | None = None) -> dict:
    """Serve `draft` on the target of `work` (a server of its own: SGLang's lifetime figure is this run's), run
    `eval --url` on it; the eval report."""
    out_json = LOG_DIR / f"eval_{name}_s{SPEC_STEPS}.json"
    serve = [
        "--preset",
        preset,
        "--model-path",
        str(work / "target"),
        *SERVE_ARGS,
        "--speculative-draft-model-path",
        str(draft),
        *SPEC_ARGS,
    ]
    for attempt in (1, 2):
        started = False
        try:
            with sglang_server(
                serve,
                name=f"eval_{name}_s{SPEC_STEPS}_server{'' if attempt == 1 else '_again'}",
                port=free_port(),
                env=activation_env(work),
            ) as (url, _, _):
                started = True
                cmd = [
                    sys.executable,
                    "-m",
                    "sglang_eagle3_ext",
                    "eval",
                    "--draft",
                    str(draft),
                    "--data",
                    str(data or work / "hs"),
                    "--target",
                    str(work / "target"),
                    "--steps",
                    str(SPEC_STEPS),
                    "--topk",
                    "1",
                    "--draft-tokens",
                    str(SPEC_STEPS + 1),
                    "--device",
                    "cuda",
                    "--dtype",
                    "bf16",
                    "--url",
                    url,
                    "--json",
                    str(out_json),
                    "--quiet",
                ]
                t = time.time()
                p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
                (LOG_DIR / f"eval_{name}_s{SPEC_STEPS}.log").write_text(
                    f"$ {' '.join(cmd)}\n# rc={p.returncode} {time.time() - t:.1f}s\n{p.stdout}\n--- stderr ---\n"
                    f"{p.stderr}"
                )
            break
        except RuntimeError:
            # a server that died before it was healthy, once (seen with several jobs starting servers at once: its
            # own warm-up request refused on its port); eval's own failures are not retried
            if started or attempt == 2:
                raise
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out_json.read_text())


def _cumulative(positions: list) -> list:
    """P(a round accepts >= k drafts), k = 1.., from eval's position rows (conditional p, or cumulative given)."""
    out, run = [], 1.0
    for p in positions:
        if p.get("cumulative") is not None:
            run = p["cumulative"]
        elif run == 0:
            run = 0.0  # no round got this far (a position never judged after one never accepted)
        else:
            run = run * p["p"] if p.get("p") is not None and run is not None else None
        out.append(run)
    return out


def _r(x, n=4):
    return round(x, n) if isinstance(x, (int, float)) else x


def _row(rep: dict) -> dict:
    s = rep["served"]
    pred = rep["predicted_accept_length"]
    sglang = s.get("server_avg_spec_accept_length")
    pc, sc = _cumulative(rep["rounds"]["positions"]), _cumulative(s["positions"])
    return {
        "predicted": pred,
        "sglang_avg_spec_accept_length": sglang,
        "difference": pred - sglang if sglang is not None and pred is not None else None,
        "served_from_replies": s["accept_length"],
        "difference_from_replies": s["difference"],
        "predicted_per_request": rep.get("predicted_accept_length_per_request"),
        "served_per_request": s.get("accept_length_per_request"),
        "predicted_positions": [_r(p["p"]) for p in rep["rounds"]["positions"]],
        "served_positions": [_r(p["p"]) for p in s["positions"]],
        "predicted_cumulative": [_r(x) for x in pc],
        "served_cumulative": [_r(x) for x in sc],
        "position_differences": [_r(a - b) if a is not None and b is not None else None for a, b in zip(pc, sc)],
        "every_anchor": {
            "accept_length": rep["accept_length_every_anchor"],
            "anchors": rep["anchors"],
            "positions": [_r(p["p"]) for p in rep["positions"]],
        },
        "rounds": {"predicted": rep["rounds"]["rounds"], "served": s["verify_rounds"]},
        "histogram": s.get("histogram"),
        "implausible": s.get("implausible", []),
        "served_draft": s.get("draft"),
        "served_draft_is_evaluated": s.get("draft_is_evaluated_draft"),
        "greedy_outputs_equal_recorded": f"{s['outputs_equal_recorded']}/{s['requests']}",
        "heldout": rep["heldout"]["rule"],
        "samples_per_s": rep["samples_per_s"],
    }


def _fmt(x, spec=".3f"):
    return format(x, spec) if isinstance(x, (int, float)) else "n/a"


def _write(name: str, target: str, table: dict, left_out: dict) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / f"eval_predicted_vs_served_{name}_s{SPEC_STEPS}.json").write_text(
        json.dumps(
            {
                "target": target,
                "steps": SPEC_STEPS,
                "tolerance": TOLERANCE,
                "position_tolerance": POSITION_TOLERANCE,
                "drafts": table,
                "left_out": left_out,
            },
            indent=2,
        )
    )


def _say(label: str, d: str, r: dict) -> None:
    print(
        f"eval [{label} s{SPEC_STEPS} {d}]: predicted {_fmt(r['predicted'])}, SGLang avg_spec_accept_length "
        f"{_fmt(r['sglang_avg_spec_accept_length'])} (diff {_fmt(r['difference'], '+.3f')}); from the replies "
        f"{_fmt(r['served_from_replies'])}; per request predicted {_fmt(r['predicted_per_request'])} served "
        f"{_fmt(r['served_per_request'])}; P(>=k) predicted {r['predicted_cumulative']} served "
        f"{r['served_cumulative']}; outputs equal recorded {r['greedy_outputs_equal_recorded']}",
        flush=True,
    )


def _check(table: dict) -> None:
    for d, r in table.items():
        assert not r["implausible"], (d, r["implausible"])
        assert r["sglang_avg_spec_accept_length"] is not None, (d, "the server reported no avg_spec_accept_length")
        assert abs(r["difference"]) <= TOLERANCE, (d, r)
        assert abs(r["difference_from_replies"]) <= TOLERANCE, (d, r)
        assert len(r["position_differences"]) == SPEC_STEPS, (d, r)
        assert all(x is not None and abs(x) <= POSITION_TOLERANCE for x in r["position_differences"]), (d, r)
        assert r["served_draft_is_evaluated"] is not False, (d, r["served_draft"])


def test_predicted_accept_length_matches_served():
    """The round trip's draft and drafts of middling and weak quality made from the same preparation."""
    work = _rt_work()
    if not all((work / n / "config.json").exists() for n in ("target", "draft_sglang")) or not (work / "hs").is_dir():
        pytest.skip(
            "needs a prepared round trip in $SGE3_RT_DIR (tests/gpu/test_roundtrip_gpu.py, "
            "SGE3_RT_PREPARE_ONLY=1 is enough)"
        )
    label = "kimi_width" if KIMI else "tiny"
    drafts = _drafts(work)
    _make_ahead(drafts)
    table, left_out, failed = {}, {}, {}
    for name, make in drafts:
        try:
            d = make()
            if d is None:
                left_out[name] = f"less than {TRAIN_DISK_GB} GB free for its training"
                continue
            table[name] = _row(_eval_served(work, name, d))
            _say(label, name, table[name])
        except Exception as e:  # noqa: BLE001 - one draft failing still leaves the others' figures
            failed[name] = f"{type(e).__name__}: {str(e)[-1500:]}"
            print(f"eval [{label} s{SPEC_STEPS} {name}]: FAILED {failed[name][-300:]}", flush=True)
        _write(label, "kimi" if KIMI else "tiny", table, {**left_out, **failed})
    assert not failed, failed
    middling = [d for d, r in table.items() if MIDDLING[0] <= r["sglang_avg_spec_accept_length"] <= MIDDLING[1]]
    print(f"eval [{label} s{SPEC_STEPS}]: {len(table)} drafts, middling (served {MIDDLING}): {middling}", flush=True)
    _check(table)
    assert len(middling) >= 2, {d: r["sglang_avg_spec_accept_length"] for d, r in table.items()}


def test_kimi_wrapper_mla_draft_predicted():
    """The Kimi-K2.5 wrapper's MLA draft (test_kimi_gpu.py's round trip, kept in $SGE3_KIMI_RT_DIR)."""
    work = Path(knobs.get("SGE3_KIMI_RT_DIR") or "/nonexistent")
    if not all((work / n / "config.json").exists() for n in ("target", "draft_mla")) or not (work / "hs").is_dir():
        pytest.skip("needs the Kimi wrapper round trip in $SGE3_KIMI_RT_DIR (tests/gpu/test_kimi_gpu.py -k roundtrip)")
    table = {"kimi_wrapper_mla": _row(_eval_served(work, "kimi_wrapper_mla", work / "draft_mla", "tiny-kimi-k25"))}
    _say("kimi_wrapper", "kimi_wrapper_mla", table["kimi_wrapper_mla"])
    _write("kimi_wrapper", "tiny Kimi-K2.5 wrapper", table, {})
    _check(table)
