"""Test aid, loaded in every SGLang process of a GPU test through a sitecustomize.py (see install()): records
the hidden states the EAGLE-3 draft is fed, so a test can compare them with what the dump wrote.

EagleDraftWorker._draft_extend_for_prefill(batch, target_hidden_states, ...) and
_draft_extend_for_decode(batch, batch_result) put exactly these tensors into the draft-extend batch's
`spec_info.hidden_states` (EagleDraftExtendInput(hidden_states=...)): the prefill's target states
(one row per extended token), and the verify result's `logits_output.hidden_states` (ndt rows per request,
of which the first accept_lens[i] are the accepted tokens + bonus that the draft extends over).
Each call is saved as one file in $SGE3_RECORD_DRAFT_INPUT: {rid: (positions [n], token ids [n], states [n, W])}.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import knobs

ENV = "SGE3_RECORD_DRAFT_INPUT"
_seq = itertools.count()


def _save(records: dict) -> None:
    import torch

    if records:
        torch.save(records, Path(knobs.get(ENV)) / f"{os.getpid()}_{next(_seq):06d}.pt")


def _safe(fn):
    """A recording failure is logged, never raised into the server (the test then finds positions missing)."""

    def wrapper(wrapped, instance, args, kwargs):
        try:
            fn(args, kwargs)
        except Exception as e:  # noqa: BLE001
            print(f"draft_input_recorder: {type(e).__name__}: {e}", flush=True)
        return wrapped(*args, **kwargs)

    return wrapper


def _record_prefill(args, kwargs):
    import torch

    batch, hs = args[0], args[1] if len(args) > 1 else kwargs["target_hidden_states"]
    rec = {}
    if not batch.forward_mode.is_idle():
        row = 0
        for i, req in enumerate(batch.reqs):
            n, p = batch.extend_lens[i], batch.prefix_lens[i]
            rec[req.rid] = (
                torch.arange(p, p + n),
                batch.input_ids[row : row + n].cpu().clone(),
                hs[row : row + n].cpu().clone(),
            )
            row += n
    _save(rec)


def _record_decode(args, kwargs):
    batch, res = args[0], args[1] if len(args) > 1 else kwargs["batch_result"]
    hs, acc, vi = res.logits_output.hidden_states, res.accept_lens.cpu(), batch.spec_info
    rec = {}
    if hs is not None and not batch.forward_mode.is_idle():
        ndt = hs.shape[0] // len(batch.reqs)
        for i, req in enumerate(batch.reqs):
            a, r = int(acc[i]), i * ndt
            rec[req.rid] = (
                vi.positions[r : r + a].cpu().clone(),
                vi.draft_token[r : r + a].cpu().clone(),
                hs[r : r + a].cpu().clone(),
            )
    _save(rec)


def _patch(module) -> None:
    import wrapt

    cls = module.EagleDraftWorker
    wrapt.wrap_function_wrapper(cls, "_draft_extend_for_prefill", _safe(_record_prefill))
    wrapt.wrap_function_wrapper(cls, "_draft_extend_for_decode", _safe(_record_decode))


def register() -> None:
    if knobs.get(ENV):
        import wrapt

        wrapt.register_post_import_hook(_patch, "sglang.srt.speculative.eagle_worker_v2")


def install(tmp: Path, record_dir: Path, env: dict) -> dict:
    """env + a sitecustomize.py (first on PYTHONPATH) that runs our .pth line and registers the recorder."""
    d = tmp / "recorder_site"
    d.mkdir(exist_ok=True)
    pth = (Path(__file__).resolve().parents[2] / "sglang_eagle3_ext" / "_startup" / "sglang_eagle3_ext.pth").read_text()
    (d / "sitecustomize.py").write_text(
        f"{pth.strip()}\nimport sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import draft_input_recorder; draft_input_recorder.register()\n"
    )
    record_dir.mkdir(parents=True, exist_ok=True)
    return {**env, ENV: str(record_dir), "PYTHONPATH": os.pathsep.join([str(d), env.get("PYTHONPATH", "")])}


def load(record_dir: Path) -> dict:
    """{rid: {position: (token id, state row)}} over every recorded call."""
    import torch

    out: dict = {}
    for f in sorted(record_dir.glob("*.pt")):
        for rid, (pos, ids, hs) in torch.load(f).items():
            d = out.setdefault(rid, {})
            for p, t, h in zip(pos.tolist(), ids.tolist(), hs):
                d[p] = (t, h)
    return out
