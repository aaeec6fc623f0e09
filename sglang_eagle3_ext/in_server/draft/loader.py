"""Strict accounting around the release's own LlamaForCausalLMEagle3.load_weights.

SGLang's load_weights drops any key that matches no parameter, in every release. We keep the
release's loading code (stacking, TP sharding, d2t -> hot_token_id) and instead:
  1. check the draft's files and config with the same rules as `check` (before anything loads);
  2. feed it names normalised for the installed release, validating each tensor's shape/values;
  3. record which checkpoint tensor reached which parameter shard by instrumenting each
     parameter's weight_loader for the duration of the call (the release looks it up per param);
  4. refuse unless every tensor was used or is on the ignore list and every parameter that needs
     trained values got one.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

from ... import envs
from ..._log import log_once
from ...draft import arch as layouts
from ...draft import errors as E
from ...draft import keys, rules
from ...draft.errors import DraftLoadError, Problem
from ...draft.safetensors_io import scan_headers
from ...draft.target import same_as_target_head
from ...patching import bind
from ...server.startup import startup_context

DEFER_WIDTH_ENV = envs.DEFER_WIDTH_CHECK  # 1: leave fc-width problems to the forward guard
VALUE_SCAN_ENV = envs.VALUE_SCAN  # 0: skip the NaN/Inf scan (one read pass per weight)


class _Feed:
    """Iterable handed to the release: normalised names, each tensor checked; remembers the current one."""

    def __init__(self, weights, layout, spec, where, target=(None, None)):
        self.weights, self.layout, self.spec, self.where = weights, layout, spec, where
        # None: the draft is served as the model itself, no EAGLE worker will swap its head
        self.as_draft = target is not None
        self.target_dir, self.target_cfg = target or (None, None)
        self.shapes = rules.expected_shapes(spec)
        self.arch = spec.layout_module
        self.current: str | None = None
        self.seen: dict[str, str] = {}  # canonical -> name in the checkpoint
        self.ignored: dict[str, str] = {}  # canonical -> why
        self.problems: list[Problem] = []
        self.renames: collections.Counter = collections.Counter()
        self.d2t = None
        self.scan_values = envs.get(VALUE_SCAN_ENV)

    def __iter__(self):
        for name, tensor in self.weights:
            canon, notes = keys.canonical(name)
            self.renames.update(notes)
            if canon in self.seen:
                self.problems.append(
                    Problem(
                        E.UNEXPECTED_WEIGHT,
                        f"{self.where}: {name} and {self.seen[canon]} are the same tensor ({canon}) twice",
                        key=canon,
                    )
                )
                continue
            self.seen[canon] = name
            why = keys.ignored_reason(canon, self.spec.embed_from_target)
            if why is not None:
                self.ignored[canon] = why
                if canon == "t2d" and tuple(tensor.shape) != self.shapes.get("t2d"):
                    self.problems += rules.tensor_problems(
                        canon, tuple(tensor.shape), self.spec, self.shapes, self.where
                    )
                if canon == "embed_tokens.weight" and tuple(tensor.shape) == self.shapes.get(canon):
                    # SGLang loads it too, then replaces it with the target's: behave exactly as the release
                    self.current = canon
                    yield self.arch.to_release(canon, self.layout)[0], tensor
                continue
            bad = rules.tensor_problems(canon, tuple(tensor.shape), self.spec, self.shapes, self.where)
            target, refused = self.arch.to_release(canon, self.layout)
            if refused is not None:
                bad.append(refused)
            if canon == rules.HEAD and not bad and self.as_draft and rules.head_from_target(self.spec):
                why, problem = self._trained_head(tensor)
                if why is not None:
                    self.ignored[canon] = why
                    log_once(
                        f"draft-head-ignored:{self.where}",
                        "EAGLE-3 draft %s: %s not loaded: it %s",
                        self.where,
                        canon,
                        why,
                    )
                    continue
                bad.append(problem)
            if canon == "d2t" and not bad:
                bad += rules.d2t_problems(tensor.cpu(), self.spec, self.where)
                self.d2t = tensor
            if bad:
                self.problems += bad
                continue
            if target != canon:
                self.renames[f"{canon.split('.')[0]}.* -> {target.split('.')[0]}.* (SGLang {self.layout.release})"] += 1
            self.current = canon
            yield target, tensor
        self.current = None

    def _trained_head(self, tensor):
        """SGLang will replace this head with the target's: ignored if equal to it, else refused (rules.trained_head)."""

        shape = tuple(tensor.shape)
        same, about = same_as_target_head(tensor, self.target_dir, self.target_cfg, shape)
        if self.target_dir is None:
            about = "the target's weights are not readable here"
        return rules.trained_head(self.spec, shape, self.where, same, about)


class _Recorder:
    """Instruments every parameter's weight_loader: (canonical key, param name, shard id) per call."""

    def __init__(self, model, feed, default_loader):
        self.model, self.feed, self.default = model, feed, default_loader
        self.hits: list[tuple[str | None, str, object]] = []
        self._undo = []

    def _wrap(self, pname, orig):
        hits, feed = self.hits, self.feed

        def loader(param, loaded, *args, **kwargs):
            call = bind(orig, (param, loaded, *args), kwargs)  # the name moved across releases
            shard = call.get("loaded_shard_id", call.get("shard_id"))
            hits.append((feed.current, pname, shard))
            return orig(param, loaded, *args, **kwargs)

        return loader

    def __enter__(self):
        for pname, p in self.model.named_parameters():
            if isinstance(getattr(type(p), "weight_loader", None), property):  # BasevLLMParameter-style
                orig = p._weight_loader
                p._weight_loader = self._wrap(pname, orig)
                self._undo.append(lambda p=p, o=orig: setattr(p, "_weight_loader", o))
            elif "weight_loader" in p.__dict__:
                orig = p.__dict__["weight_loader"]
                p.weight_loader = self._wrap(pname, orig)
                self._undo.append(lambda p=p, o=orig: setattr(p, "weight_loader", o))
            else:
                p.weight_loader = self._wrap(pname, self.default)
                self._undo.append(lambda p=p: delattr(p, "weight_loader"))
        return self

    def __exit__(self, *exc):
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        return False


_SIZES = ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size")
_SIZES += ("num_hidden_layers", "draft_vocab_size", "target_hidden_size", "tie_word_embeddings", "head_dim")


def _config_dict(config) -> dict:
    # A shallow view, read-only here: to_dict() deep-copies the whole config on every load. Attributes
    # served by the class (not the instance) are read directly for the keys the rules depend on.
    d = dict(vars(config))
    for k in (*_SIZES, *layouts.config_fields()):
        if hasattr(config, k):
            d[k] = getattr(config, k)
    for k in ("torch_dtype", "dtype"):  # transformers holds a torch.dtype where config.json holds its name
        if d.get(k) is not None and not isinstance(d[k], str):
            d[k] = str(d[k]).replace("torch.", "")
    return d


def _model_config_dict(model) -> dict:
    """The config as the draft's files say it: SGLang's __init__ rewrites draft_vocab_size=None to vocab_size
    when it will take the target's lm_head (load_lm_head_from_target); the rules need the original null."""
    d = _config_dict(model.config)
    if getattr(model, "load_lm_head_from_target", False):
        d["draft_vocab_size"] = None
    return d


def _draft_dir(config, ctx) -> Path | None:
    for cand in (getattr(config, "_name_or_path", None), getattr(config, "name_or_path", None)):
        if cand and os.path.isdir(cand):
            return Path(cand)
    return ctx.draft_dir  # a hub id: SGLang's download in the local cache


def _model_path_is(d: Path | None, ctx) -> bool:
    mp = ctx.model_path
    try:
        return d is not None and bool(mp) and Path(os.path.expanduser(mp)).resolve() == d.resolve()
    except OSError:
        return False


def pre_load_problems(model, layout) -> tuple[rules.DraftSpec | None, list[Problem], str, tuple]:
    """Files, config and target checks: everything decidable before a tensor is read; and the target
    (folder, config) when there is one, for the lm_head rule."""

    ctx = startup_context()
    d = _draft_dir(model.config, ctx)
    where = str(d) if d else "draft"
    problems: list[Problem] = []
    if d is not None:
        _, fp = scan_headers(d)
        problems += fp
    spec, cp = rules.spec_from_config(_model_config_dict(model), layout, where=f"{where}/config.json")
    problems += cp
    as_model = _model_path_is(d, ctx)
    tc = None if as_model else ctx.target_config  # the draft itself as "model": nothing to compare
    if spec is not None and tc is not None:
        problems += rules.target_problems(spec, tc, where=f"{where} vs target")
    if envs.get(DEFER_WIDTH_ENV):
        problems = [p for p in problems if p.code != E.FC_WIDTH]
    return spec, problems, where, (None if as_model else (ctx.target_dir if tc is not None else None, tc))


def draft_kind(model) -> str:
    """How messages name a draft of `model`'s class: its layout's LABEL where it has one, else "EAGLE-3"."""
    arch = layouts.find({"architectures": [type(model).__name__]})
    return (arch.LABEL if arch is not None else None) or "EAGLE-3"


def strict_load(wrapped, model, weights):
    layout = keys.installed_layout()
    spec, problems, where, target = pre_load_problems(model, layout)
    fatal = [p for p in problems if not p.warning]
    if spec is None or fatal:
        raise DraftLoadError(
            problems, f"{draft_kind(model)} draft {where} cannot be served by SGLang {layout.release}:"
        )
    return load_accounted(wrapped, model, weights, spec, layout, where, target)


def served_config(model) -> dict:
    """The config dict the rules judge a built draft `model` by (as its files say it)."""
    return _model_config_dict(model)


def load_accounted(wrapped, model, weights, spec, layout, where, target):
    """Steps 2-4 for a draft whose files and config passed the pre-load rules: `wrapped(feed)` (the release's
    load_weights) fills `model`; DraftLoadError unless every tensor is accounted for and finite."""
    feed = _Feed(weights, layout, spec, where, target)
    kind = draft_kind(model)
    default_loader = getattr(sys.modules[type(model).__module__], "default_weight_loader", None)
    if default_loader is None:
        from sglang.srt.model_loader.weight_utils import default_weight_loader as default_loader
    recorder = _Recorder(model, feed, default_loader)
    try:
        with recorder:
            result = wrapped(feed)
    except DraftLoadError:
        raise
    except Exception as e:  # the release's own loaders assert shapes; say which tensor
        raise DraftLoadError(
            feed.problems + [Problem(E.SHAPE, f"{where}: loading {feed.current}: {e}", key=feed.current)],
            f"{kind} draft {where} failed to load in SGLang {layout.release}:",
        ) from e
    problems = feed.problems + _accounting(model, feed, recorder, spec, layout, where)
    if feed.scan_values:
        problems += _non_finite(model, recorder, spec, where)
    if problems:
        raise DraftLoadError(
            problems,
            f"{kind} draft {where} is not fully accounted for in SGLang {layout.release} "
            f"(SGLang alone would have loaded it silently):",
        )
    loaded = len(_used(recorder, feed, spec))
    fc_out, fc_in = next(p for n, p in model.named_parameters() if keys.canonical(n)[0] == "fc.weight").shape
    log_once(
        f"draft-load-summary:{where}",
        "%s draft %s (%s): %d tensors loaded, %d ignored (%s), renames: %s; fc %dx%d (K=%d), SGLang %s",
        kind,
        where,
        type(model).__name__,
        loaded + (feed.d2t is not None),
        len(feed.ignored),
        ", ".join(sorted(feed.ignored)) or "none",
        keys.summarize_renames({k: v for k, v in feed.renames.items() if v}),
        fc_out,
        fc_in,
        spec.k,
        layout.release,
    )
    return result


def _non_finite(model, recorder, spec, where) -> list[Problem]:
    """NaN/Inf in any parameter filled from the checkpoint. Runs on the parameters' device after
    loading, a single host sync. aminmax propagates NaN and exposes +-Inf in one vectorised pass in
    the weights' own dtype (an fp32 sum or isfinite() costs several times the load on CPU)."""
    import torch

    fused = spec.layout_module.FUSED
    sources, shards = collections.defaultdict(list), collections.defaultdict(set)
    for canon, pname, shard in recorder.hits:
        shards[pname].add(shard)
        if canon and canon not in sources[pname]:
            sources[pname].append(canon)
        parts = fused.get(keys.release_to_canonical_param(pname))
        if parts:  # the release fused these keys into it
            sources[pname] = list(parts)
    params = dict(model.named_parameters())
    # a stacked parameter short of a shard holds uninitialised memory there: reported as that missing key instead
    whole = {n for n in sources if set(keys.expected_shards(keys.release_to_canonical_param(n))) <= shards[n]}
    names = [n for n in sources if n in whole and params[n].is_floating_point()]
    if not names:
        return []
    ext = torch.stack([torch.stack(torch.aminmax(params[n].detach())).float() for n in names])
    finite = torch.isfinite(ext).all(dim=1)
    if bool(finite.all()):
        return []
    out = []
    for n, ok in zip(names, finite.tolist()):
        if not ok:
            p = params[n].detach()
            bad = int((~torch.isfinite(p)).sum())
            if bad:
                src = sources[n][0] if len(sources[n]) == 1 else f"{n} (from {', '.join(sources[n])})"
                out.append(rules.non_finite_problem(src, bad, p.numel(), where))
    return out


def _used(recorder, feed, spec) -> set[str]:
    """Checkpoint keys that reached a parameter. A parameter the release fuses from several keys (the layout's
    FUSED) is filled once the last of them arrives, so a hit on it uses all of them."""
    used = {c for c, _, _ in recorder.hits if c}
    fused = spec.layout_module.FUSED
    for _, pname, _ in recorder.hits:
        used |= set(fused.get(keys.release_to_canonical_param(pname), ())) & set(feed.seen)
    return used


def _accounting(model, feed, recorder, spec, layout, where) -> list[Problem]:
    """Every checkpoint tensor used or ignored; every parameter of the module filled from the checkpoint or,
    by SGLang's sharing rules (rules.required_keys: embed/lm_head from the target), left to the target."""
    used = _used(recorder, feed, spec)
    filled = collections.defaultdict(set)
    for _, pname, shard in recorder.hits:
        filled[pname].add(shard)
    P = []
    fed_bad = {p.key for p in feed.problems}
    valid = set(feed.seen) - fed_bad
    half = rules.partial_fused(spec, valid)
    fused = spec.layout_module.FUSED
    for canon, name in feed.seen.items():
        if canon in used or canon in feed.ignored or canon in fed_bad:
            continue
        if canon == "d2t" and getattr(model, "hot_token_id", None) is not None:
            continue
        if half and canon == half[1]:
            continue  # reported below as the missing other half
        P.append(
            Problem(
                E.UNEXPECTED_WEIGHT,
                f"{where}: {name} reached no parameter of SGLang {layout.release}'s "
                f"draft — {rules.likely_cause(canon, spec)}",
                key=canon,
            )
        )
    required = rules.required_keys(spec)
    known = rules.expected_shapes(spec)
    missing = set()
    for pname, _ in model.named_parameters():
        canon = keys.release_to_canonical_param(pname)
        if canon in fused:
            if not filled.get(pname):
                missing |= {h for h in fused[canon] if h not in valid} or set(fused[canon])
            continue
        for shard, key in keys.expected_shards(canon).items():
            if shard in filled.get(pname, set()):
                continue
            if key in required:
                missing.add(key)
            elif key not in known:  # a parameter our rules do not know: it would run uninitialised
                P.append(
                    Problem(
                        E.MISSING_WEIGHT,
                        f"{where}: SGLang {layout.release}'s {type(model).__name__} "
                        f"parameter {pname} received no checkpoint tensor (expected "
                        f"{key}) — it would run with uninitialised values",
                        key=key,
                    )
                )
    if spec.needs_d2t and getattr(model, "hot_token_id", None) is None:
        missing.add("d2t")
    missing -= fed_bad  # already reported with a precise reason
    return P + rules.missing_problems((required - missing) | ({rules.HEAD} & set(feed.seen)), spec, where)
