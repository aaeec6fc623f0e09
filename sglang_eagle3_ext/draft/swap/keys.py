"""Which keys of a draft's config.json SGLang reads into the draft it builds: found in the release's own source.

A swap loads new weights into the module SGLang built at start-up; it does not rebuild it. Whatever the draft's
class (and what it constructs: decoder layers, attention, rotary, logits processor) read from the config then
stays the served draft's: the rotary table (rope_theta, rope_scaling, rope_is_neox_style, partial_rotary_factor,
a top-level original_max_position_embeddings, an MLA draft's rope_interleave), the norms' eps, the activation.
Methods that read the model's config later (forward, load_weights) read the served draft's config object too.
So a new draft must agree with the served one on every such key (rules.structure_problems).

`build_keys(layout)` lists them for the installed release: the draft class is found in SGLang's source (ast, no
import, as `compat` finds patch targets) and walked: every method of the class and its SGLang bases, every
SGLang class or function they pass the config to (by parameter, alias or `self.<attr>` it was stored in), every
`config.X`, `getattr(config, "X"...)` and `hasattr(config, "X")` read there. BASELINE (the keys a review of the
supported releases found) is always compared too, so a release whose source cannot be read here loses nothing
known. Keys the spec or the HF index rule judges (shapes, K, vocabularies: JUDGED_ELSEWHERE) are left to them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from ..._log import logger

# read by the supported releases' draft classes (llama.py / llama_eagle3.py, deepseek_v2.py / kimi_k25_eagle3.py)
BASELINE = (
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_is_neox_style",
    "partial_rotary_factor",
    "original_max_position_embeddings",
    "rope_interleave",
    "max_position_embeddings",
    "rms_norm_eps",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "norm_output",
    "model_type",
)
# judged with their own rule and message: the spec's fields (rules.SPEC_FIELDS, rules.spec_from_config), the
# aux layers and HF indices (index_problems), the token map (token_map_problems); the dtype is the server's
# (--dtype: the loader casts into it); the names of the checkpoint are no build option
JUDGED_ELSEWHERE = frozenset(
    {
        "architectures",
        "hidden_size",
        "target_hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "draft_vocab_size",
        "tie_word_embeddings",
        "bias",
        "fc_norm",
        "use_aux_norm",
        "norm_before_fc",
        "num_aux_hidden_states",
        "eagle_config",
        "eagle_aux_hidden_state_layer_ids",
        "torch_dtype",
        "dtype",
        "name_or_path",
    }
)
_MAX_DEPTH = 12


def sglang_root() -> Path | None:
    """The installed `sglang` package folder (not imported here)."""
    import importlib.util
    import sys

    mod = sys.modules.get("sglang")
    if mod is not None and getattr(mod, "__file__", None):
        return Path(mod.__file__).parent
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def build_keys(layout_module) -> tuple[str, ...]:
    """The config keys a swap compares for drafts of `layout_module` (draft/arch) on the installed release."""
    return _build_keys(layout_module.SGLANG_CLASS, tuple(getattr(layout_module, "CONFIG_FIELDS", ())))


@functools.lru_cache(maxsize=None)
def _build_keys(target: str, layout_fields: tuple) -> tuple[str, ...]:
    root = sglang_root()
    found = config_reads(root, target) if root is not None else set()
    if not found:
        logger.info(
            "EAGLE-3 draft swap: %s not readable in SGLang's source here; comparing the known build keys (%s)",
            target,
            ", ".join(BASELINE),
        )
    return tuple(sorted((found | set(BASELINE)) - JUDGED_ELSEWHERE - set(layout_fields)))


def config_reads(root: Path, target: str) -> set[str]:
    """Every config key the class `target` ("sglang.mod:Class") reads, statically; empty when it is not found."""
    mod, _, cls = target.partition(":")
    scan = _Scan(root)
    path = scan.module_file(mod)
    hit = scan.resolve(path, cls) if path is not None else None
    if hit is None or not isinstance(hit[1], ast.ClassDef):
        return set()
    scan.visit_class(hit[0], hit[1], {0: "config", "config": "config"}, 0)
    return scan.keys


class _Scan:
    """The walk: classes and functions the config reaches, the keys read on the way."""

    def __init__(self, root: Path):
        self.root = root
        self.keys: set[str] = set()
        self._seen: set = set()
        self._trees: dict[Path, ast.Module | None] = {}

    # ---- where names are defined ----
    def module_file(self, module: str | None) -> Path | None:
        parts = (module or "").split(".")
        if parts[0] != "sglang":
            return None
        base = self.root.joinpath(*parts[1:])
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
        return None

    def tree(self, path: Path) -> ast.Module | None:
        if path not in self._trees:
            try:
                self._trees[path] = ast.parse(path.read_text(errors="replace"), filename=str(path))
            except (SyntaxError, OSError, ValueError):
                self._trees[path] = None
        return self._trees[path]

    def _import_module(self, path: Path, node: ast.ImportFrom) -> str | None:
        if node.level == 0:
            return node.module
        pkg = list(path.relative_to(self.root.parent).with_suffix("").parts[:-1])
        pkg = pkg[: len(pkg) - (node.level - 1)]
        return ".".join(pkg + ([node.module] if node.module else []))

    def resolve(self, path: Path, name: str, imports_only: bool = False, depth: int = 0):
        """(file, ClassDef | FunctionDef) that `name` means in module `path` (defined there or imported from a
        sglang module); imports_only: skip the module's own definitions (`class X(X)` names the imported X)."""
        tree = self.tree(path)
        if tree is None or depth > 6:
            return None
        if not imports_only:
            for node in tree.body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                    return path, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if (a.asname or a.name) == name:
                        f = self.module_file(self._import_module(path, node))
                        hit = self.resolve(f, a.name, depth=depth + 1) if f is not None else None
                        if hit is not None:
                            return hit
        return None

    def methods(self, path: Path, cls: ast.ClassDef, depth: int = 0) -> dict:
        """name -> (file, FunctionDef, defining ClassDef) over the class and its SGLang bases (nearest first)."""
        out: dict = {}
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = (path, node, cls)
        if depth > 6:
            return out
        for base in cls.bases:
            if not isinstance(base, ast.Name):
                continue
            hit = self.resolve(path, base.id, imports_only=base.id == cls.name)
            if hit is not None and isinstance(hit[1], ast.ClassDef):
                for k, v in self.methods(hit[0], hit[1], depth + 1).items():
                    out.setdefault(k, v)
        return out

    def base_init(self, path: Path, cls: ast.ClassDef):
        """The __init__ `super().__init__` reaches from `cls` (its first SGLang base defining one)."""
        for base in cls.bases:
            if not isinstance(base, ast.Name):
                continue
            hit = self.resolve(path, base.id, imports_only=base.id == cls.name)
            if hit is not None and isinstance(hit[1], ast.ClassDef):
                m = self.methods(hit[0], hit[1]).get("__init__")
                if m is not None:
                    return m
        return None

    # ---- the walk ----
    def visit_class(self, path: Path, cls: ast.ClassDef, given: dict, depth: int) -> None:
        """Construct `cls` with the config passed as `given` (position after self / keyword -> ...): its
        __init__ with those, then every other method with the `self.<attr>` the config was stored in."""
        key = ("class", str(path), cls.name, tuple(sorted(map(str, given))))
        if key in self._seen or depth > _MAX_DEPTH:
            return
        self._seen.add(key)
        methods = self.methods(path, cls)
        attrs: set[str] = set()
        init = methods.get("__init__")
        if init is not None:
            self.visit_function(init[0], init[1], _params(init[1], given, method=True), (path, cls), attrs, depth)
        for name, (mpath, fn, _) in methods.items():
            if name != "__init__" and attrs:
                self.visit_function(mpath, fn, set(), (path, cls), attrs, depth)

    def visit_function(self, path: Path, fn, tracked: set, owner, attrs: set, depth: int) -> None:
        """Record the reads of the config in `fn` (its names `tracked`, `self.<attrs>`), follow where it goes."""
        key = ("fn", str(path), fn.lineno, fn.name, frozenset(tracked), frozenset(attrs), owner and owner[1].name)
        if key in self._seen or depth > _MAX_DEPTH:
            return
        self._seen.add(key)
        names = set(tracked)

        def is_cfg(e) -> bool:
            if isinstance(e, ast.Name):
                return e.id in names
            if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                return e.attr in attrs
            if isinstance(e, ast.Call) and _dotted(e.func) in ("copy.deepcopy", "copy.copy", "deepcopy"):
                return bool(e.args) and is_cfg(e.args[0])
            return False

        # aliases (`c = config`, `self.config = config`, `cfg = copy.deepcopy(config)`), to a fixed point
        changed = True
        while changed:
            changed = False
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and is_cfg(node.value):
                    for t in node.targets:
                        if isinstance(t, ast.Name) and t.id not in names:
                            names.add(t.id)
                            changed = True
                        elif (
                            isinstance(t, ast.Attribute)
                            and isinstance(t.value, ast.Name)
                            and t.value.id == "self"
                            and t.attr not in attrs
                        ):
                            attrs.add(t.attr)
                            changed = True
        called = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and id(node) not in called
                and is_cfg(node.value)
            ):
                self._add(node.attr)
            elif isinstance(node, ast.Call):
                fname = _dotted(node.func)
                if (
                    fname in ("getattr", "hasattr")
                    and len(node.args) >= 2
                    and is_cfg(node.args[0])
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)
                ):
                    self._add(node.args[1].value)
                    continue
                given = {i: True for i, a in enumerate(node.args) if is_cfg(a)}
                given.update({k.arg: True for k in node.keywords if k.arg and is_cfg(k.value)})
                if given:
                    self._follow(path, node, given, owner, attrs, depth + 1)

    def _follow(self, path: Path, call: ast.Call, given: dict, owner, attrs: set, depth: int) -> None:
        """Into what a call passes the config to: a SGLang class (constructed), function, method of self, or
        super().__init__."""
        f = call.func
        if isinstance(f, ast.Name):
            hit = self.resolve(path, f.id)
            if hit is None:
                return
            fpath, node = hit
            if isinstance(node, ast.ClassDef):
                self.visit_class(fpath, node, given, depth)
            else:
                self.visit_function(fpath, node, _params(node, given, method=False), None, set(), depth)
        elif isinstance(f, ast.Attribute) and owner is not None:
            target = None
            if isinstance(f.value, ast.Name) and f.value.id == "self":
                target = self.methods(*owner).get(f.attr)
            elif isinstance(f.value, ast.Call) and _dotted(f.value.func) == "super" and f.attr == "__init__":
                target = self.base_init(*owner)
            if target is not None:
                mpath, fn, defining = target
                self.visit_function(mpath, fn, _params(fn, given, method=True), (mpath, defining), attrs, depth)

    def _add(self, key: str) -> None:
        if key and not key.startswith("_"):
            self.keys.add(key)


def _params(fn, given: dict, method: bool) -> set[str]:
    """The parameter names of `fn` that receive the config (positions counted after self for a method)."""
    a = fn.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    if method and positional:
        positional = positional[1:]
    names = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
    out = set()
    for k in given:
        if isinstance(k, int):
            if k < len(positional):
                out.add(positional[k])
        elif k in names:
            out.add(k)
    return out


def _dotted(e) -> str:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        inner = _dotted(e.value)
        return f"{inner}.{e.attr}" if inner else ""
    return ""
