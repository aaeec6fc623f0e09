"""A draft layout is the whole interface: a third layout registered at run time (a Llama-shaped one under another
class name, as an EAGLE-3.1 or P-EAGLE variant would be) goes through train (its route and its --dry-run plan),
convert, check, eval (its SGLang-equal module) and swap (its build keys) without any of them naming it. The
features that dispatch through the layout name none; the target's tensors are found by one rule."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("speculators.train.cli")
torch = pytest.importorskip("torch")

from safetensors.torch import save_file  # noqa: E402
from train_world import SMALL, train_args, write_samples  # noqa: E402

from sglang_eagle3_ext.draft import arch as layouts  # noqa: E402
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target  # noqa: E402

PKG = Path(__file__).resolve().parents[3] / "sglang_eagle3_ext"
V = "0.5.16"
NAME, ARCH = "p-eagle", "PEagleForCausalLMEagle3"


def _third_layout(calls: list, monkeypatch) -> types.ModuleType:
    """The layout package (its network role beside it): Llama's, under another class name, on Llama's route; its
    network and its route's run and plan step each record their call."""
    from sglang_eagle3_ext.draft.arch import llama
    from sglang_eagle3_ext.draft.arch.llama import net as llama_net
    from sglang_eagle3_ext.training.speculators import plan as route_plan
    from sglang_eagle3_ext.training.speculators import train as route_train

    def recorded(what, fn):
        def call(*a, **k):
            calls.append(what)
            return fn(*a, **k)

        return call

    mod = types.ModuleType("p_eagle_layout")
    mod.__dict__.update({k: v for k, v in vars(llama).items() if not k.startswith("__")})
    mod.NAME, mod.ARCH, mod.LABEL = NAME, ARCH, "P-EAGLE"
    mod.SOURCE_NAMES, mod.READERS = (f"{ARCH} (P-EAGLE)",), {}
    mod.source_format = lambda cfg: "sglang" if ARCH in (cfg.get("architectures") or []) else None
    net = types.ModuleType("p_eagle_layout.net")
    net.Net = recorded("net", llama_net.Net)
    monkeypatch.setitem(sys.modules, net.__name__, net)
    monkeypatch.setattr(route_train, "train", recorded("train", route_train.train))
    monkeypatch.setattr(route_plan, "step", recorded("plan", route_plan.step))
    return mod


@pytest.fixture
def world(tmp_path, monkeypatch):
    calls: list = []
    mod = _third_layout(calls, monkeypatch)
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    layouts.register(mod)
    target = ensure_tiny_target(tmp_path / "target", **SMALL)
    data = write_samples(tmp_path / "data", 8, lambda i: 24 + i)
    return {"root": tmp_path, "target": target, "data": data, "calls": calls, "layout": mod}


def _options(world, out, *extra):
    from sglang_eagle3_ext.cli import train as train_cli

    args = train_cli.build_parser().parse_args(
        [
            *train_args(world["data"], world["target"], out),
            "--device",
            "cpu",
            "--total-seq-len",
            "128",
            "--num-workers",
            "0",
            "--min-val-acc",
            "0",
            *extra,
        ]
    )
    # the command line's --draft-arch choices are the layouts registered when it is imported: the third layout,
    # registered by this test, is given to the library
    return dataclasses.replace(train_cli.options_from_args(args), draft_arch=NAME)


def _relabelled(src: Path, dst: Path) -> Path:
    """The converted draft under the third layout's class name (what its own trainer would write)."""
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = [ARCH]
    (src / "config.json").write_text(json.dumps(cfg))
    (src / ".sglang-eagle3-output.json").unlink(missing_ok=True)
    return src.rename(dst)


def test_a_third_layout_goes_through_train_convert_check_eval_and_swap(world):
    from sglang_eagle3_ext.acceptance.evaluate import EvalOptions, evaluate
    from sglang_eagle3_ext.draft.check import check_draft
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.draft.swap.keys import build_keys
    from sglang_eagle3_ext.training import ROUTES, train_draft

    assert NAME in ROUTES and ROUTES[NAME] == "speculators"
    plan = train_draft(_options(world, world["root"] / "plan", "--dry-run"))
    assert plan["arch"] == NAME and world["calls"] == ["plan"]

    summary = train_draft(_options(world, world["root"] / "trained", "--steps", "2"))
    assert world["calls"] == ["plan", "train"] and summary["steps"] == 2

    converted = convert(world["root"] / "trained", world["root"] / "converted", sglang_version=V, log=lambda *_: None)
    draft = _relabelled(converted, world["root"] / "p_eagle_draft")
    rep = check_draft(draft, world["target"], sglang_version=V)
    assert not rep.errors and rep.draft_class == ARCH, rep.render()

    rep = evaluate(
        EvalOptions(
            draft=str(draft),
            data=str(world["data"]),
            target=str(world["target"]),
            steps=2,
            device="cpu",
            dtype="fp32",
            heldout_fraction=0.25,
        )
    )
    assert world["calls"] == ["plan", "train", "net"]
    assert rep["draft_class"] == ARCH and rep["heldout"]["samples"] == 2 and rep["anchors"] > 0

    llama = layouts.get("llama")
    assert build_keys(world["layout"]) == build_keys(llama) and "rope_theta" in build_keys(world["layout"])


def test_a_layouts_held_out_rule_is_evals_and_its_routes():
    from sglang_eagle3_ext.acceptance.data import heldout

    rule = types.SimpleNamespace(heldout=lambda n, ratio: (n - 2, f"the last 2 of {n} at {ratio:g}"))
    assert heldout(10, 0.05, rule) == ([8, 9], "the last 2 of 10 at 0.95")
    assert heldout(10, 1.0, rule)[0] == list(range(10))


# The features that dispatch through the layout: a layout is named in draft/arch only.
DISPATCHING = sorted(
    str(p.relative_to(PKG)) for pkg in ("acceptance", "training", "refresh") for p in (PKG / pkg).rglob("*.py")
) + [
    "in_server/draft/swap.py",
    "in_server/draft/swap_tensors.py",
    "draft/swap/keys.py",
    "draft/swap/rules.py",
    "draft/swap/client.py",
]


@pytest.mark.parametrize("path", DISPATCHING)
def test_dispatching_modules_compare_no_layout_name(path):
    tree = ast.parse((PKG / path).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            found += [ast.unparse(node) for o in operands if isinstance(o, ast.Constant) and o.value in layouts.names()]
            found += [
                ast.unparse(node)
                for o in operands
                if isinstance(o, (ast.Tuple, ast.List, ast.Set))
                and any(isinstance(e, ast.Constant) and e.value in layouts.names() for e in o.elts)
            ]
        if isinstance(node, ast.Dict):  # a table keyed by layout name is a switch
            found += [ast.unparse(k) for k in node.keys if isinstance(k, ast.Constant) and k.value in layouts.names()]
    assert not found, f"{path} switches on a layout name: {found}"


def test_target_tensors_are_found_by_one_rule_without_a_bare_suffix(tmp_path):
    from sglang_eagle3_ext.draft.target import names_tensor
    from sglang_eagle3_ext.training.target_view import EMBED, HEAD, NORM, read_tensors

    assert names_tensor("lm_head.weight", HEAD) and names_tensor("language_model.lm_head.weight", HEAD)
    assert not names_tensor("mtp_lm_head.weight", HEAD)
    assert not names_tensor("vision_tower.lm_head.weight", HEAD)
    t = {
        "mtp_lm_head.weight": torch.full((8, 4), 7.0),
        "lm_head.weight": torch.ones(8, 4),
        "model.embed_tokens.weight": torch.ones(8, 4),
        "model.norm.weight": torch.ones(4),
    }
    save_file({k: t[k] for k in ("mtp_lm_head.weight",)}, str(tmp_path / "a.safetensors"))  # sorted first
    save_file({k: v for k, v in t.items() if k != "mtp_lm_head.weight"}, str(tmp_path / "b.safetensors"))
    found = read_tensors(tmp_path)
    assert torch.equal(found[HEAD], torch.ones(8, 4)) and set(found) == {EMBED, HEAD, NORM}
    assert re.search("names_tensor", (PKG / "training" / "target_view.py").read_text())
