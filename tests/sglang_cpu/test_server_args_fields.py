"""SGLang's ServerArgs read through one adapter, whatever the installed release builds it with (a dataclass up to
0.5.22, a msgspec struct from 0.5.23): the field names are the real class's, and every one of them the launcher
checks a preset against is a flag SGLang's own parser knows."""

from __future__ import annotations

import argparse
import dataclasses

import msgspec
import pytest

from sglang_eagle3_ext.launch import presets, server_args

pytestmark = pytest.mark.sglang


def test_server_args_fields_of_the_installed_release():
    from sglang.srt.server_args import ServerArgs

    names = server_args.field_names(ServerArgs)
    assert {"model_path", "tp_size", "speculative_draft_model_path", "attention_backend"} <= set(names)
    assert len(names) == len(set(names))
    # the same names SGLang's own record machinery sees (msgspec or dataclasses, whichever it is)
    want = (
        msgspec.structs.fields(ServerArgs)
        if not dataclasses.is_dataclass(ServerArgs)
        else dataclasses.fields(ServerArgs)
    )
    assert names == [f.name for f in want]
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    dests = {a.dest for a in parser._actions}
    assert {"model_path", "speculative_draft_model_path"} <= dests & set(names)


def test_server_args_fields_shipped_presets_validate_on_the_installed_release():
    fields, version = presets.server_args_fields()
    parser = presets.sglang_parser()
    for name in presets.available_presets():
        p = presets.load(name)
        presets.validate(p, fields, version)
        presets.check_values(p, parser)


def test_server_args_fields_both_record_kinds_and_a_refusal():
    @dataclasses.dataclass
    class AsDataclass:
        model_path: str = ""
        tp_size: int = 1

    AsStruct = msgspec.defstruct(
        "AsStruct",
        [("model_path", str), ("tp_size", int, 1), ("nodes", list, msgspec.field(default_factory=list))],
        dict=True,
    )
    assert server_args.field_names(AsDataclass) == ["model_path", "tp_size"]
    assert server_args.field_names(AsStruct) == ["model_path", "tp_size", "nodes"]
    assert server_args.field_defaults(AsDataclass) == {"model_path": "", "tp_size": 1}
    assert server_args.field_defaults(AsStruct) == {"tp_size": 1}

    class Plain:
        model_path = ""

    with pytest.raises(TypeError, match="neither a dataclass nor a msgspec struct"):
        server_args.field_names(Plain)


@pytest.mark.parametrize("preset", ["tiny-dump", "tiny-kimi-k25-dump"])
def test_server_args_fields_dump_presets_plan_eager_prefills_on_the_installed_release(preset, tmp_path, monkeypatch):
    """The dump presets ask for eager prefills; the plan passes this release's own switch, and every preset value
    either has a flag here or is the release's default (nothing to pass)."""
    from sglang_eagle3_ext.launch import eager_prefill
    from sglang_eagle3_ext.launch.options import LaunchOptions
    from sglang_eagle3_ext.launch.plan import build_plan

    monkeypatch.chdir(tmp_path)
    plan = build_plan(LaunchOptions(preset=preset, dry_run=True), [])
    fields = server_args.installed_field_names()
    switch = next(f for f, _ in eager_prefill.SWITCHES if f in fields)
    assert "--" + switch.replace("_", "-") in plan.command
    parser = presets.sglang_parser()
    ns = presets.quiet_parse(parser, plan.sglang_args)
    assert getattr(ns, switch) is True
    defaults = server_args.installed_field_defaults()
    for key, value in presets.load(preset).server_args.items():
        if key == "model_path":
            continue
        flag = presets._action_for(parser, key)
        assert (flag is not None and getattr(ns, flag.dest) == value) or (
            flag is None and defaults.get(key) == value
        ), key
