"""The dump under prefill CUDA graphs, decided from the real ServerArgs of the installed release
(0.5.16 in .venv): refused at start-up with the flag to set wherever the release resolves a prefill graph,
started where it resolves eager prefill (0.5.16's own rule switches breakable graphs off for MLA targets)."""

from __future__ import annotations

import pytest
import torch

from sglang_eagle3_ext import envs
from sglang_eagle3_ext.dump import config as C
from sglang_eagle3_ext.in_server.dump import start
from sglang_eagle3_ext.in_server.dump.prefill_graphs import FIX_NEW, prefill_graph_backend, refusal
from sglang_eagle3_ext.server import runtime as sglang_runtime

pytestmark = pytest.mark.sglang


def _on_cuda(sa):
    """The args as resolved, with the device a GPU host resolves (CPU-resolved args never capture graphs)."""
    object.__setattr__(sa, "device", "cuda")
    return sa


def _args(sglang_cpu, model, **kw):
    return _on_cuda(sglang_cpu.server_args(model, **kw))


@pytest.mark.parametrize("backend", ["tc_piecewise", "breakable"])
def test_explicit_prefill_graph_backend_is_refused_with_the_flag(sglang_cpu, deepseek_dir, backend):
    sa = _args(sglang_cpu, deepseek_dir, cuda_graph_backend_prefill=backend)
    assert prefill_graph_backend(sa) == backend  # the release keeps an explicit choice (locked)
    msg = refusal(sa)
    assert msg and FIX_NEW in msg and backend in msg


@pytest.mark.parametrize(
    "kw",
    [{"disable_cuda_graph": True}, {"disable_prefill_cuda_graph": True}, {"cuda_graph_backend_prefill": "disabled"}],
)
def test_eager_prefill_is_accepted(sglang_cpu, deepseek_dir, kw):
    sa = _args(sglang_cpu, deepseek_dir, **kw)
    assert prefill_graph_backend(sa) is None and refusal(sa) is None


def test_cpu_resolved_args_never_refuse(sglang_cpu, deepseek_dir):
    """A CPU process resolves a prefill backend but captures no CUDA graph: the dump runs there."""
    sa = sglang_cpu.server_args(deepseek_dir, cuda_graph_backend_prefill="tc_piecewise")
    assert refusal(sa) is None


def test_release_defaults_on_cuda(sglang_cpu, deepseek_dir, tmp_path, monkeypatch):
    """The release's own defaults as a CUDA host resolves them (its platform probe answering CUDA): the
    MLA target follows the release's rule (0.5.16: breakable default, switched off for MLA -> the dump starts;
    0.5.14: tc_piecewise kept -> refused), a non-MLA layout keeps its prefill graph (-> would be refused)."""
    import sglang.srt.utils as sgl_utils
    from transformers import LlamaConfig

    monkeypatch.setattr(sgl_utils, "is_cuda", lambda: True)  # read lazily by default_prefill_backend()
    sa = _args(sglang_cpu, deepseek_dir)
    want = getattr(sa.cuda_graph_config.prefill, "backend", None)
    assert prefill_graph_backend(sa) == (None if want == "disabled" else want)
    try:
        from sglang.srt.model_executor.cuda_graph_config import default_prefill_backend
    except ImportError:
        pytest.skip("this release has no per-platform prefill default")
    if default_prefill_backend() == "breakable":  # 0.5.16+: the MLA rule applies
        assert prefill_graph_backend(sa) is None
        llama = tmp_path / "llama"
        cfg = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128,
        )
        cfg.architectures = ["LlamaForCausalLM"]
        cfg.save_pretrained(llama)
        assert prefill_graph_backend(_args(sglang_cpu, str(llama))) == "breakable"


def _target():
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.logits_processor import LogitsProcessor
    from transformers import PretrainedConfig

    cfg = PretrainedConfig(hidden_size=16, num_hidden_layers=4, vocab_size=32, architectures=["DeepseekV3ForCausalLM"])
    inner = torch.nn.Module()
    inner.norm, inner.layers_to_capture = RMSNorm(16, eps=1e-6), []
    m = type("DeepseekV3ForCausalLM", (torch.nn.Module,), {})()  # attach() goes by the class name
    m.config, m.model, m.capture_aux_hidden_states = cfg, inner, False
    m.logits_processor = LogitsProcessor(cfg)
    return m


def test_server_start_stops_with_the_flag(sglang_cpu, deepseek_dir, tmp_path, monkeypatch):
    """Through the start-up path the patched DeepseekV2ForCausalLM.__init__ takes: no writer, no capture."""
    from sglang_eagle3_ext.in_server.dump.writer.thread import DumpStartupError

    before = sglang_runtime.server_args()
    start.reset()
    monkeypatch.setenv(envs.DUMP_DIR, str(tmp_path))
    monkeypatch.setenv(C.ENV_LAYERS, "1,2")
    monkeypatch.setenv("SGLANG_EAGLE3_EXT_DUMP_MIN_TOKENS", "1")
    m = _target()
    try:
        sglang_cpu.publish(_args(sglang_cpu, deepseek_dir, cuda_graph_backend_prefill="tc_piecewise"))
        with pytest.raises(DumpStartupError, match=FIX_NEW):
            start.install_from_init(m)
        assert start.get_writer() is None and not m.capture_aux_hidden_states
        sglang_cpu.publish(_args(sglang_cpu, deepseek_dir, disable_prefill_cuda_graph=True))
        start.install_from_init(m)
        assert start.get_writer() is not None and m.capture_aux_hidden_states
        start.get_writer().close()
    finally:
        if before is not None:
            sglang_cpu.publish(before)


def test_releases_before_cuda_graph_config():
    """0.5.10's resolved args (read from its source): piecewise prefill unless disable_piecewise_cuda_graph;
    its --disable-cuda-graph leaves piecewise prefill on (the model runner reads only that field)."""
    from types import SimpleNamespace

    from sglang_eagle3_ext.in_server.dump.prefill_graphs import FIX_OLD

    on = SimpleNamespace(device="cuda", disable_cuda_graph=True, disable_piecewise_cuda_graph=False)
    assert prefill_graph_backend(on) == "piecewise" and FIX_OLD in refusal(on)
    off = SimpleNamespace(device="cuda", disable_cuda_graph=False, disable_piecewise_cuda_graph=True)
    assert refusal(off) is None


def test_eagle_target_on_tc_piecewise_prefills_eagerly():
    """Dumping while serving EAGLE-3: the release's capture_prefill_graph skips tc_piecewise for the EAGLE
    target (0.5.14+), so the dump starts; breakable is captured for it, so that one is refused."""
    from types import SimpleNamespace

    def sa(backend, **kw):
        return SimpleNamespace(
            device="cuda",
            speculative_algorithm="EAGLE3",
            enable_return_hidden_states=False,
            cuda_graph_config=SimpleNamespace(prefill=SimpleNamespace(backend=backend)),
            **kw,
        )

    assert refusal(sa("tc_piecewise")) is None
    assert refusal(sa("breakable"))
    assert refusal(SimpleNamespace(**{**vars(sa("tc_piecewise")), "enable_return_hidden_states": True}))
