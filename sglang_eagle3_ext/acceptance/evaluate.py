"""`sglang-eagle3 eval`'s library: the served accept length of a draft, predicted offline on held-out samples
(and, with a server URL, measured beside it). `evaluate(Options(...))` returns the report; `render` prints it."""
from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from ..boundary import Refused

log = logging.getLogger("sglang_eagle3_ext.acceptance")
DTYPES = ("bf16", "fp32")


@dataclasses.dataclass
class Options:
    draft: str
    data: str
    target: str | None = None
    steps: int = 3
    topk: int = 1
    draft_tokens: int | None = None         # None: steps + 1
    heldout_fraction: float = 0.05
    samples: int | None = None               # at most this many of the held-out samples (the first ones)
    device: str | None = None                # None: cuda when there is one
    dtype: str = "bf16"
    url: str | None = None
    concurrency: int = 8
    timeout: float = 300.0
    batch_tokens: int = 8192                 # rows simulated at once
    say: object = None                       # progress lines (None: silent)


def settings_problem(steps: int, topk: int, draft_tokens: int | None) -> str | None:
    """Why these speculative settings cannot be simulated (None: they can)."""
    if topk != 1:
        return (f"--topk {topk}: eval simulates --speculative-eagle-topk 1 only (an exact simulation of the draft "
                f"tree topk > 1 builds is not implemented); evaluate with --topk 1, or serve and use `bench`")
    if draft_tokens is not None and draft_tokens != steps + 1:
        return (f"--draft-tokens {draft_tokens}: with --topk 1 SGLang drafts a chain of --steps {steps} tokens and "
                f"verifies {steps + 1} (steps + 1); pass --draft-tokens {steps + 1} or leave it out")
    return None


def _device(name: str | None) -> str:
    import torch

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise Refused(f"--device {name}: torch sees no CUDA device here; use --device cpu")
    return name


def _target(o: Options, source) -> tuple[Path | None, str]:
    if o.target:
        t = Path(o.target)
        if not (t / "config.json").is_file():
            raise Refused(f"--target {o.target}: no config.json there (the target model's folder)")
        return t, "--target"
    mp = source.model_path
    if mp and (Path(mp) / "config.json").is_file():
        return Path(mp), f"the model_path recorded in {source.root}'s dump metadata"
    return None, "none (no --target, and the data records no local model folder)"


def _layers_agree(loaded, source) -> str:
    """The aux layers the data holds must be the ones a server feeds the draft."""
    have, want = source.layer_ids, loaded.hf_indices
    if have is not None and want is not None and list(have) != list(want):
        raise Refused(f"--data {source.root} holds HF hidden_states {list(have)} ({source.layers_from}), but a server "
                      f"feeds this draft {list(want)} ({loaded.hf_from}): eval would predict for inputs the draft "
                      f"never gets; dump with the draft's layers, or evaluate the draft trained on these")
    if have is None or want is None:
        return (f"aux layers not compared: data {have if have is not None else 'unrecorded'}, draft "
                f"{want if want is not None else 'unknown'} ({loaded.hf_from})")
    return f"aux layers: HF hidden_states {list(have)} (data and draft agree)"


def _batches(source, idx: list[int], loaded, budget: int, max_len: int | None, notes: list):
    """Lists of samples of about `budget` tokens each, read in order."""
    spec, batch, n_tok, cut = loaded.spec, [], 0, 0
    for i in idx:
        s = source.load(i, spec.k, spec.target_hidden, spec.vocab)
        if max_len is not None and s.ids.shape[0] > max_len:
            s = dataclasses.replace(s, ids=s.ids[:max_len], aux=s.aux[:max_len], mask=s.mask[:max_len])
            cut += 1
        batch.append(s)
        n_tok += int(s.ids.shape[0])
        if n_tok >= budget:
            yield batch
            batch, n_tok = [], 0
    if batch:
        yield batch
    if cut:
        notes.append(f"{cut} sample(s) cut to the draft's max_position_embeddings {max_len} (its RoPE table)")


def _simulate(loaded, batch, steps: int, device: str, dtype, every, walk) -> None:
    import torch

    from .simulate import draft_tokens, pack, run_lengths

    p = pack([(s.ids, s.aux) for s in batch], device, dtype)
    region = torch.tensor([m for s in batch for m in s.mask], dtype=torch.bool, device=device)
    with torch.no_grad():
        proposed = draft_tokens(loaded.model, p, steps, loaded.hot)
        accepted, known = run_lengths(proposed, p, region, steps)
    accepted, known = accepted.cpu().numpy(), known.cpu().numpy()
    every.add_many(accepted, known)
    start = 0
    for s in batch:
        L = int(s.ids.shape[0])
        walk.add(accepted[start:start + L], known[start:start + L], s.mask)
        start += L


def _run(o: Options, loaded, source, idx: list[int], device: str, notes: list) -> dict:
    import torch

    from .stats import Tally, Walk

    dtype = torch.bfloat16 if o.dtype == "bf16" else torch.float32
    max_len = int(loaded.cfg["max_position_embeddings"]) if loaded.spec.layout == "mla" else None
    every, walk = Tally(o.steps), Walk(o.steps)
    t0, done, samples = time.perf_counter(), 0, []
    for batch in _batches(source, idx, loaded, o.batch_tokens, max_len, notes):
        _simulate(loaded, batch, o.steps, device, dtype, every, walk)
        done += len(batch)
        samples += [dataclasses.replace(s, aux=None) for s in batch] if o.url else []   # --url needs ids only
        if o.say:
            o.say(f"simulated {done}/{len(idx)} samples ({done / (time.perf_counter() - t0):.1f}/s)")
    secs = time.perf_counter() - t0
    return {"every": every, "walk": walk, "seconds": secs, "samples": samples}


def evaluate(o: Options) -> dict:
    from . import drafts
    from .data import heldout, open_source

    problem = settings_problem(o.steps, o.topk, o.draft_tokens)
    if problem:
        raise Refused(problem)
    if o.dtype not in DTYPES:
        raise Refused(f"--dtype {o.dtype}: one of {', '.join(DTYPES)}")
    device = _device(o.device)
    server = None
    if o.url:
        from .served import connect

        server = connect(o.url, o.steps, o.steps + 1, o.timeout)
    source = open_source(o.data)
    if not source.n:
        raise Refused(f"--data {o.data}: no samples to evaluate (the {source.kind} holds none)")
    target, target_from = _target(o, source)
    import torch

    loaded = drafts.load(o.draft, target, device, torch.bfloat16 if o.dtype == "bf16" else torch.float32)
    notes = list(loaded.notes) + [_layers_agree(loaded, source)]
    split, rule = heldout(source.n, o.heldout_fraction, loaded.spec.layout == "mla")
    idx = split[: o.samples] if o.samples else split
    if not idx:
        raise Refused(f"--data {o.data}: --samples/--heldout-fraction select no sample of {source.n}")
    r = _run(o, loaded, source, idx, device, notes)
    every, walk = r["every"], r["walk"]
    if not every.units:
        raise Refused(f"--data {o.data}: the {len(idx)} held-out samples hold no anchor (no position with a next "
                      f"token inside the response region); evaluate other samples")
    report = {
        "draft": str(o.draft), "draft_class": loaded.spec.arch, "data": str(o.data), "data_kind": source.kind,
        "target": str(target) if target else None, "target_from": target_from,
        "heldout": {"rule": rule, "samples": len(idx), "of": source.n, "first": idx[0], "last": idx[-1],
                    "capped_by_samples": len(idx) < len(split)},
        "steps": o.steps, "topk": 1, "draft_tokens": o.steps + 1, "device": device, "dtype": o.dtype,
        "predicted_accept_length": walk.as_served(),
        "rounds": {"rounds": walk.rounds, "tokens": walk.tokens, "positions": walk.tally.positions(),
                   "accept_length": walk.tally.accept_length(), "histogram": walk.histogram},
        "anchors": every.units, "positions": every.positions(), "accept_length_every_anchor": every.accept_length(),
        "samples_per_s": len(idx) / r["seconds"] if r["seconds"] else None, "seconds": round(r["seconds"], 3),
        "notes": notes,
    }
    if server is not None:
        from .served import serve

        report["served"] = serve(*server, r["samples"], o.steps, o.concurrency)
        s, pred = report["served"]["accept_length"], report["predicted_accept_length"]
        report["served"]["difference"] = (pred - s) if s is not None and pred is not None else None
    return report


def _fmt(v, spec=".3f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"


def render(rep: dict) -> str:
    k = rep["steps"]
    h = rep["heldout"]
    lines = [f"eval: {rep['draft']} ({rep['draft_class']}), steps {k}, topk 1, draft tokens {k + 1}, "
             f"{rep['dtype']} on {rep['device']}",
             f"  data: {h['samples']} held-out samples of {rep['data']} ({rep['data_kind']}): {h['rule']}"
             + (" (first ones, --samples)" if h["capped_by_samples"] else ""),
             f"  predicted accept length {_fmt(rep['predicted_accept_length'])}  (as SGLang reports it: "
             f"{rep['rounds']['tokens']} tokens / {rep['rounds']['rounds']} verify rounds of a greedy server on "
             f"these sequences)",
             "  P(draft token k accepted | tokens < k accepted):  " + "  ".join(f"k={i + 1:<5}" for i in range(k)),
             "    over the server's rounds                       " + "  ".join(
                 f"{_fmt(p['p']):7}" for p in rep["rounds"]["positions"]),
             f"    over every anchor ({rep['anchors']} anchors)" + " " * max(1, 19 - len(str(rep['anchors'])))
             + "  ".join(f"{_fmt(p['p']):7}" for p in rep["positions"]),
             f"  1 + sum_k prod p: {_fmt(rep['rounds']['accept_length'])} (rounds), "
             f"{_fmt(rep['accept_length_every_anchor'])} (every anchor)"]
    s = rep.get("served")
    if s:
        lines.append(f"  served ({s['url']}): accept length {_fmt(s['accept_length'])} over {s['verify_rounds']} "
                     f"rounds, predicted - served = {_fmt(s['difference'], '+.3f')}; per position "
                     + "  ".join(_fmt(p["p"]) for p in s["positions"])
                     + f"; greedy outputs equal to the recorded ones: {s['outputs_equal_recorded']}/{s['requests']}")
    lines += [f"  note: {n}" for n in rep["notes"]]
    lines.append(f"  {_fmt(rep['samples_per_s'], '.1f')} samples/s ({rep['seconds']:.1f} s)")
    return "\n".join(lines)
