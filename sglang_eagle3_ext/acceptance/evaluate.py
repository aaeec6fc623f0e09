"""`sglang-eagle3 eval`'s library: the served accept length of a draft, predicted offline on held-out samples
(and, with a server URL, measured beside it). `evaluate(EvalOptions(...))` returns the report; `render` prints it."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from ..boundary import Refused
from . import drafts
from .data import heldout, open_source
from .options import DTYPES, EvalOptions
from .stats import Tally, Walk

log = logging.getLogger("sglang_eagle3_ext.acceptance")


SGLANG_DEFINITION = (
    "accepted drafts + 1 per verify round over the rounds (SGLang's avg_spec_accept_length, its "
    "log's accept len, the sglang:spec_accept_length metric)"
)
PER_REQUEST_DEFINITION = "generated tokens / verify rounds per request (meta_info spec_accept_length)"


def settings_problem(steps: int, topk: int, draft_tokens: int | None) -> str | None:
    """Why these speculative settings cannot be simulated (None: they can)."""
    if topk != 1:
        return (
            f"--topk {topk}: eval simulates --speculative-eagle-topk 1 only (an exact simulation of the draft "
            f"tree topk > 1 builds is not implemented); evaluate with --topk 1, or serve and use `bench`"
        )
    if draft_tokens is not None and draft_tokens != steps + 1:
        return (
            f"--draft-tokens {draft_tokens}: with --topk 1 SGLang drafts a chain of --steps {steps} tokens and "
            f"verifies {steps + 1} (steps + 1); pass --draft-tokens {steps + 1} or leave it out"
        )
    return None


def resolve_device(name: str | None) -> str:
    import torch

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise Refused(f"--device {name}: torch sees no CUDA device here; use --device cpu")
    return name


def _target(o: EvalOptions, source) -> tuple[Path | None, str]:
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
        raise Refused(
            f"--data {source.root} holds HF hidden_states {list(have)} ({source.layers_from}), but a server "
            f"feeds this draft {list(want)} ({loaded.hf_from}): eval would predict for inputs the draft "
            f"never gets; dump with the draft's layers, or evaluate the draft trained on these"
        )
    if have is None or want is None:
        return (
            f"aux layers not compared: data {have if have is not None else 'unrecorded'}, draft "
            f"{want if want is not None else 'unknown'} ({loaded.hf_from})"
        )
    return f"aux layers: HF hidden_states {list(have)} (data and draft agree)"


def _block_size_note(model, steps: int) -> list[str]:
    """A draft proposing a block is served at its config's block size unless the server names another."""
    from .block import drafts_block

    trained = getattr(model, "block_size", None)
    if not drafts_block(model) or trained in (None, steps + 1):
        return []
    return [
        f"the draft's config says block size {trained}, which a server without --speculative-num-draft-tokens "
        f"uses: --steps {trained - 1} predicts that server; --steps {steps} one serving blocks of {steps + 1}"
    ]


def token_batches(source, idx: list[int], loaded, budget: int, max_len: int | None, notes: list):
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


def simulate_batch(loaded, batch, steps: int, device: str, dtype, every, walk) -> None:
    import torch

    from . import block, simulate
    from .simulate import pack, run_lengths

    p = pack([(s.ids, s.aux) for s in batch], device, dtype)
    region = torch.tensor([m for s in batch for m in s.mask], dtype=torch.bool, device=device)
    propose = block.draft_tokens if block.drafts_block(loaded.model) else simulate.draft_tokens
    with torch.no_grad():
        proposed = propose(loaded.model, p, steps, loaded.hot)
        accepted, known = run_lengths(proposed, p, region, steps)
    accepted, known = accepted.cpu().numpy(), known.cpu().numpy()
    every.add_many(accepted, known)
    start = 0
    for s in batch:
        L = int(s.ids.shape[0])
        walk.add(accepted[start : start + L], known[start : start + L], s.mask)
        start += L


def _run(o: EvalOptions, loaded, source, idx: list[int], device: str, notes: list) -> dict:
    import torch

    dtype = torch.bfloat16 if o.dtype == "bf16" else torch.float32
    max_len = loaded.max_len
    every, walk = Tally(o.steps), Walk(o.steps)
    t0, done, samples = time.perf_counter(), 0, []
    for batch in token_batches(source, idx, loaded, o.batch_tokens, max_len, notes):
        simulate_batch(loaded, batch, o.steps, device, dtype, every, walk)
        done += len(batch)
        samples += [dataclasses.replace(s, aux=None) for s in batch] if o.url else []  # --url needs ids only
        if o.say:
            o.say(f"simulated {done}/{len(idx)} samples ({done / (time.perf_counter() - t0):.1f}/s)")
    secs = time.perf_counter() - t0
    return {"every": every, "walk": walk, "seconds": secs, "samples": samples}


def local_inputs(o: EvalOptions):
    """Every local input checked, cheapest first, before any server is asked or any weight read:
    (draft spec, data source, target folder, where the target came from, held-out indices, the split's rule)."""

    problem = settings_problem(o.steps, o.topk, o.draft_tokens)
    if problem:
        raise Refused(problem)
    if o.dtype not in DTYPES:
        raise Refused(f"--dtype {o.dtype}: one of {', '.join(DTYPES)}")
    drafts.read_config(Path(o.draft))
    source = open_source(o.data)
    if not source.n:
        raise Refused(f"--data {o.data}: no samples to evaluate (the {source.kind} holds none)")
    target, target_from = _target(o, source)
    _, spec = drafts.served_spec(o.draft, target)
    split, rule = heldout(source.n, o.heldout_fraction, spec.layout_module)
    idx = split[: o.samples] if o.samples else split
    if not idx:
        raise Refused(f"--data {o.data}: --samples/--heldout-fraction select no sample of {source.n}")
    return spec, source, target, target_from, idx, rule, len(split)


def _heldout_report(idx: list, rule: str, n: int, n_split: int) -> dict:
    return {
        "rule": rule,
        "samples": len(idx),
        "of": n,
        "first": idx[0],
        "last": idx[-1],
        "capped_by_samples": len(idx) < n_split,
    }


def _evaluated(o: EvalOptions, draft_class: str, source, target, target_from, idx, rule, n_split, device: str) -> dict:
    """What the plan and the report both say: the draft, the data, the target, the held-out split, the settings."""
    return {
        "draft": str(o.draft),
        "draft_class": draft_class,
        "data": str(o.data),
        "data_kind": source.kind,
        "target": str(target) if target else None,
        "target_from": target_from,
        "heldout": _heldout_report(idx, rule, source.n, n_split),
        "steps": o.steps,
        "topk": 1,
        "draft_tokens": o.steps + 1,
        "device": device,
        "dtype": o.dtype,
    }


def _plan(o: EvalOptions, spec, source, target, target_from, idx, rule, n_split, device: str) -> dict:
    return {
        "dry_run": True,
        **_evaluated(o, spec.arch, source, target, target_from, idx, rule, n_split, device),
        "url": o.url,
        "notes": [
            "dry run: inputs checked; no weight loaded, no sample simulated, no request sent"
            + (" (the server's settings are read by the real run)" if o.url else "")
        ],
    }


def evaluate(o: EvalOptions) -> dict:

    spec, source, target, target_from, idx, rule, n_split = local_inputs(o)
    device = resolve_device(o.device)
    if o.dry_run:
        return _plan(o, spec, source, target, target_from, idx, rule, n_split, device)
    server = None
    if o.url:
        from ..draft import arch as layouts
        from .block import drafts_block
        from .served import connect

        block = drafts_block(layouts.net(spec.layout_module))  # the network's class says it
        server = connect(o.url, o.steps, o.steps + 1, o.timeout, spec.layout_module, block)
    import torch

    loaded = drafts.load(o.draft, target, device, torch.bfloat16 if o.dtype == "bf16" else torch.float32)
    notes = list(loaded.notes) + [_layers_agree(loaded, source)] + _block_size_note(loaded.model, o.steps)
    if server is not None and server[1].get("speculative_draft_window_size") is not None:
        notes.append(
            f"the server's --speculative-draft-window-size {server[1]['speculative_draft_window_size']} "
            f"is ignored by SGLang's {spec.arch}: simulated with full attention"
        )
    r = _run(o, loaded, source, idx, device, notes)
    every, walk = r["every"], r["walk"]
    if not every.units:
        raise Refused(
            f"--data {o.data}: the {len(idx)} held-out samples hold no anchor (no position with a next "
            f"token inside the response region); evaluate other samples"
        )
    unjudged = [p["k"] for p in walk.tally.positions() if not p["tried"]]
    if unjudged:
        notes.append(
            f"draft position(s) {unjudged} never judged in a round (responses too short): the accept "
            f"length counts them as rejected, a lower bound of what a server reports"
        )
    report = {
        **_evaluated(o, loaded.spec.arch, source, target, target_from, idx, rule, n_split, device),
        "predicted_accept_length": walk.as_sglang_reports(),
        "predicted_accept_length_per_request": walk.per_request(),
        "accept_length_definition": SGLANG_DEFINITION,
        "per_request_definition": PER_REQUEST_DEFINITION,
        "rounds": {
            "rounds": walk.rounds,
            "tokens": walk.tokens,
            "positions": walk.tally.positions(),
            "accept_length": walk.as_sglang_reports(),
            "per_request_accept_length": walk.per_request(),
            "histogram": walk.histogram,
        },
        "anchors": every.units,
        "positions": every.positions(),
        "accept_length_every_anchor": every.accept_length(),
        "samples_per_s": len(idx) / r["seconds"] if r["seconds"] else None,
        "seconds": round(r["seconds"], 3),
        "notes": notes,
    }
    if server is not None:
        from .served import serve

        report["served"] = s = serve(*server, r["samples"], o.steps, o.concurrency)
        s["difference"] = _minus(report["predicted_accept_length"], s["accept_length"])
        s["difference_per_request"] = _minus(
            report["predicted_accept_length_per_request"], s["accept_length_per_request"]
        )
        s["draft_is_evaluated_draft"] = _same_folder(s["draft"], o.draft)
        if s["draft_is_evaluated_draft"] is False:
            notes.append(
                f"the server at {o.url} serves the draft {s['draft']}, not --draft {o.draft}: the figures "
                f"compare two drafts unless the folders hold the same one"
            )
    return report


def _minus(a, b):
    return a - b if a is not None and b is not None else None


def _same_folder(served, draft) -> bool | None:
    """Whether the server's draft path names --draft's folder here (None: the server names none)."""
    if not isinstance(served, str) or not served:
        return None
    try:
        return Path(served).resolve() == Path(draft).resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def _fmt(v, spec=".3f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"


def render(rep: dict) -> str:
    k = rep["steps"]
    h = rep["heldout"]
    head = [
        f"eval: {rep['draft']} ({rep['draft_class']}), steps {k}, topk 1, draft tokens {k + 1}, "
        f"{rep['dtype']} on {rep['device']}",
        f"  data: {h['samples']} held-out samples of {rep['data']} ({rep['data_kind']}): {h['rule']}"
        + (" (first ones, --samples)" if h["capped_by_samples"] else ""),
    ]
    if rep.get("dry_run"):
        return "\n".join(head + [f"  note: {n}" for n in rep["notes"]])
    r = rep["rounds"]
    lines = head + [
        f"  predicted accept length {_fmt(rep['predicted_accept_length'])}  (as SGLang reports it: accepted drafts "
        f"+ 1 per verify round, over {r['rounds']} rounds of a greedy server on these sequences)",
        f"    per request {_fmt(rep['predicted_accept_length_per_request'])}  ({r['tokens']} tokens / {r['rounds']} "
        f"rounds, as meta_info spec_accept_length: cut at max_new_tokens)",
        "  P(draft token k accepted | tokens < k accepted):  " + "  ".join(f"k={i + 1:<5}" for i in range(k)),
        "    over the server's rounds                       " + "  ".join(f"{_fmt(p['p']):7}" for p in r["positions"]),
        f"    over every anchor ({rep['anchors']} anchors)"
        + " " * max(1, 19 - len(str(rep["anchors"])))
        + "  ".join(f"{_fmt(p['p']):7}" for p in rep["positions"]),
        f"  1 + sum_k prod p over every anchor: {_fmt(rep['accept_length_every_anchor'])}",
    ]
    s = rep.get("served")
    if s:
        lines.append(
            f"  served ({s['url']}, draft {s.get('draft') or 'not reported'}): accept length "
            f"{_fmt(s['accept_length'])} over {s['verify_rounds']} rounds, predicted - served = "
            f"{_fmt(s['difference'], '+.3f')}; per request {_fmt(s['accept_length_per_request'])} "
            f"({_fmt(s['difference_per_request'], '+.3f')})"
        )
        lines.append(
            "    per position "
            + "  ".join(_fmt(p["p"]) for p in s["positions"])
            + f"; the server's lifetime avg_spec_accept_length "
            f"{_fmt(s['server_avg_spec_accept_length'])}; greedy outputs equal to the recorded ones: "
            f"{s['outputs_equal_recorded']}/{s['requests']}"
        )
        lines += [f"  IMPLAUSIBLE served figure: {x}" for x in s["implausible"]]
    lines += [f"  note: {n}" for n in rep["notes"]]
    lines.append(f"  {_fmt(rep['samples_per_s'], '.1f')} samples/s ({rep['seconds']:.1f} s)")
    return "\n".join(lines)
