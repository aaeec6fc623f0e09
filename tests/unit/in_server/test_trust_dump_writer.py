"""The dump writer and the release flags it relies on, without SGLang: the dump's settings file read as outside
input (a FIFO or any bytes never block or crash the server's start-up), the sample rate applied by the writer
from its config alone, and the layer-0 capability read from SGLang's source."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch
from dump_writer_fixtures import H, K, _meta, _short_samples_allowed  # noqa: F401 (autouse fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3_ext import envs, versions
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.dump.manifest import read_manifest
from sglang_eagle3_ext.dump.status import meta_mismatch
from sglang_eagle3_ext.in_server.dump.assemble import ChunkBatch
from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError, DumpWriter


def _cfg(root, **kw):
    return C.DumpConfig(dump_dir=str(root), layers=(1, 2, 3), final="both", **kw)


def _batch(rids, n=3, seed=0):
    T = n * len(rids)
    g = torch.Generator().manual_seed(seed)
    return ChunkBatch(
        rids,
        [0] * len(rids),
        [n] * len(rids),
        torch.tensor([n] * len(rids)),
        torch.arange(T) % 5,
        torch.randn(K, T, H, generator=g),
        "list",
        pre=torch.randn(T, H, generator=g),
        post=torch.randn(T, H, generator=g),
        nbytes=100,
    )


def test_the_thread_writer_applies_the_configured_sample_rate(tmp_path):
    """The rate is the config's: a DumpWriter built from it (as the writer process's child builds one) writes
    exactly the requests the hash selects, with nobody patching it afterwards."""
    w = DumpWriter(_cfg(tmp_path, sample_rate=0.25), _meta())
    rids = [f"r{i}" for i in range(24)]
    w.reserve(100)
    w.submit(_batch(rids))
    assert w.flush(30)
    w.close()
    want = {r for r in rids if C.sampled(r, 0.25)}
    assert 0 < len(want) < len(rids) and set(read_manifest(tmp_path)) == want


def test_sample_rate_is_read_from_the_environment_into_the_config(tmp_path):
    cfg = C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_SAMPLE_RATE: "0.25"})
    assert cfg.sample_rate == 0.25 and cfg.wanted("r1") == C.sampled("r1", 0.25)
    assert C.from_env({envs.DUMP_DIR: str(tmp_path)}).sample_rate == 1.0
    with pytest.raises(C.DumpConfigError, match=C.ENV_SAMPLE_RATE):
        C.from_env({envs.DUMP_DIR: str(tmp_path), C.ENV_SAMPLE_RATE: "1.5"})


def test_a_fifo_as_the_dump_settings_file_is_refused_not_waited_on(tmp_path):
    """dump_meta.json that is a FIFO: the server's start-up says so instead of blocking for ever on its open."""
    os.mkfifo(tmp_path / C.META_FILE)
    out: list = []

    def start():
        try:
            DumpWriter(_cfg(tmp_path), _meta()).close()
            out.append("started")
        except DumpStartupError as e:
            out.append(str(e))

    t = threading.Thread(target=start, daemon=True)
    t.start()
    t.join(60)  # returns as soon as start-up refuses the FIFO; blocked forever without the check
    if t.is_alive():  # the old code blocks in open(): give it its writer so the thread ends
        fd = os.open(tmp_path / C.META_FILE, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(10)
        pytest.fail("the writer's start-up blocked on a FIFO named dump_meta.json")
    assert out and "FIFO" in out[0] and C.META_FILE in out[0] and "fresh dump dir" in out[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
            max_leaves=8,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_dump_settings_file_gives_a_verdict_never_an_exception(tmp_path, content):
    """Whatever dump_meta.json holds, the writer's start-up check answers None (it may append) or a one-line
    reason naming the file; it never raises (the server would then dump nothing, with no reason given)."""
    (tmp_path / C.META_FILE).write_bytes(content)
    why = meta_mismatch(tmp_path, _meta())
    assert why is None or (isinstance(why, str) and "\n" not in why and "fresh dump dir" in why)


def test_layer0_flag_read_from_the_release_source(tmp_path):
    """0.5.10's DeepseekV2Model appends `hidden_states + residual` in its loop (residual None at layer 0);
    0.5.14+ capture inside the layer after prepare_attn (captured_last_layer_outputs)."""
    old, new = tmp_path / "old" / "sglang", tmp_path / "new" / "sglang"
    for root, text in (
        (old, "                        aux_hidden_states.append(hidden_states + residual)\n"),
        (new, "                    captured_last_layer_outputs=(\n"),
    ):
        (root / "srt/models").mkdir(parents=True)
        (root / "srt/models/deepseek_v2.py").write_text(text)
    c_old, c_new = versions.capabilities_from_source(old, "0.5.10"), versions.capabilities_from_source(new, "0.5.14")
    assert not c_old.CAPTURE_LAYER0 and c_new.CAPTURE_LAYER0
    assert versions.layer0_refusal(c_new) is None
    why = versions.layer0_refusal(c_old)
    assert "0.5.10" in why and "index 0" in why and ">= 1" in why and "0.5.14" in why
    assert not versions.capabilities_for_version("0.5.10").CAPTURE_LAYER0
    assert versions.capabilities_for_version("0.5.14").CAPTURE_LAYER0


def test_resolve_layers_refuses_index_0_only_where_said():
    cfg = C.DumpConfig(dump_dir="/x", layers=(0, 2, 5))
    assert cfg.resolve_layers(8) == [0, 2, 5]
    with pytest.raises(C.DumpConfigError, match=r"DUMP_LAYERS=0,2,5: cannot"):
        cfg.resolve_layers(8, "cannot")
    assert C.DumpConfig(dump_dir="/x", layers=(1, 2, 5)).resolve_layers(8, "cannot") == [1, 2, 5]


def test_convert_no_longer_recommends_index_0_on_a_release_that_cannot_capture_it():
    from sglang_eagle3_ext.draft.keys import layout_for_version
    from sglang_eagle3_ext.draft.layers import release_aux_ids

    _, warn = release_aux_ids([0, 3, 5], layout_for_version("0.5.10"))
    assert warn and "sglang_eagle3_ext active" not in warn and ">= 1" in warn


_DUMP_VARS = [v for v in C.ALL_ENV if v != envs.DUMP_DIR]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.dictionaries(
        st.sampled_from(_DUMP_VARS),
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(
                ["0", "1", "0.25", "-1", "nan", "inf", "1e999", "2,30,58", "0,,1", "fp8", "process", " ", "１"]
            ),
        ),
        max_size=6,
    )
)
def test_any_dump_setting_gives_a_config_or_a_named_error(tmp_path, values):
    """The dump's variables as a server gets them: a DumpConfig, or DumpConfigError naming the variable."""
    env = {envs.DUMP_DIR: str(tmp_path), **values}
    try:
        cfg = C.from_env(env)
    except C.DumpConfigError as e:
        assert any(k in str(e) for k in values), (values, str(e))
        return
    assert 0.0 <= cfg.sample_rate <= 1.0 and cfg.io_threads >= 1 and cfg.min_tokens >= 1
