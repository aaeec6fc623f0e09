"""Who writes with TP=2 (and with DP attention), read from the real SGLang parallel state of two CPU ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.sglang

WORLD = """
import json, socket, sys, tempfile, multiprocessing as mp

def worker(rank, port, d, q, extra):
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.distributed import parallel_state as ps
    sa = ServerArgs(model_path=d, device="cpu", skip_tokenizer_init=True, tp_size=2, **extra)
    try:
        from sglang.srt.server_args import set_global_server_args_for_scheduler
        set_global_server_args_for_scheduler(sa)
    except ImportError:
        from sglang.srt.runtime_context import SpawnRanks, publish
        publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank))
    ps.init_distributed_environment(backend="gloo", world_size=2, rank=rank, local_rank=rank,
                                    distributed_init_method=f"tcp://127.0.0.1:{port}")
    # as the scheduler does: the attention-TP groups are split by the DP-attention size
    attn_dp = extra.get("dp_size", 1) if extra.get("enable_dp_attention") else 1
    ps.initialize_model_parallel(tensor_model_parallel_size=2, attention_data_parallel_size=attn_dp)
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    initialize_dp_attention(sa, ModelConfig.from_server_args(sa))
    from sglang_eagle3_ext.in_server.dump.ranks import rank_info, is_writer
    r = rank_info()
    q.put({"rank": rank, "ranks": r, "writes": is_writer(r)})

if __name__ == "__main__":
    from transformers import LlamaConfig
    extra = json.loads(sys.argv[1])
    d = tempfile.mkdtemp()
    c = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=128)
    c.architectures = ["LlamaForCausalLM"]
    c.save_pretrained(d)
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("spawn"); q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, d, q, extra)) for r in range(2)]
    [p.start() for p in procs]; [p.join(240) for p in procs]
    print(json.dumps(sorted([q.get(timeout=5) for _ in range(2)], key=lambda x: x["rank"])))
"""


def _world(tmp_path, **extra) -> list[dict]:
    script = tmp_path / "world.py"
    script.write_text(textwrap.dedent(WORLD))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}
    p = subprocess.run(
        [sys.executable, str(script), json.dumps(extra)], capture_output=True, text=True, timeout=400, env=env
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_tp2_exactly_one_writer(tmp_path):
    out = _world(tmp_path)
    assert [o["ranks"]["attn_tp_rank"] for o in out] == [0, 1]
    assert [o["writes"] for o in out] == [True, False]


def test_dp_attention_one_writer_per_dp_group(tmp_path):
    try:
        out = _world(tmp_path, dp_size=2, enable_dp_attention=True)
    except AssertionError as e:
        pytest.skip(f"this release does not build a DP-attention world on CPU: {str(e)[-300:]}")
    assert sorted(o["ranks"]["dp_rank"] for o in out) == [0, 1]
    assert all(o["ranks"]["attn_tp_size"] == 1 and o["writes"] for o in out), out  # one writer per group


def _break_attn_tp_probe(monkeypatch):
    """The attention-TP rank cannot be read (as when SGLang renames or moves its accessor): every route
    the probe takes raises."""
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers import dp_attention as dpa

    def broken():
        raise RuntimeError("attention TP group is not initialized")

    monkeypatch.setattr(ps, "get_attn_tensor_model_parallel_rank", broken, raising=False)
    monkeypatch.setattr(dpa, "get_attention_tp_rank", broken, raising=False)


def test_rank_probe_failure_fails_closed_in_a_multi_rank_world(sglang_cpu, tmp_path, monkeypatch):
    """With TP > 1 an unreadable attention-TP rank must not default to 0 (every rank would
    write the same samples into one manifest): no writer."""
    import torch.distributed as dist

    from sglang_eagle3_ext import envs
    from sglang_eagle3_ext.dump import config as C
    from sglang_eagle3_ext.in_server.dump import start

    _break_attn_tp_probe(monkeypatch)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)  # one rank of a world of two
    r = start.rank_info()
    assert r["attn_tp_rank"] is None and not start.is_writer(r)
    start.reset()
    from test_dump_hook import _model

    target = start.attach(_model(sglang_cpu), C.from_env({envs.DUMP_DIR: str(tmp_path)}))
    assert target.writer is None and start.get_writer() is None
    assert not (tmp_path / "dump_meta.json").exists()


def test_rank_probe_failure_in_a_world_of_one_still_writes(sglang_cpu, monkeypatch):
    """A single process is rank 0 of everything: a broken probe there must not turn the dump off."""
    from sglang_eagle3_ext.in_server.dump import start

    _break_attn_tp_probe(monkeypatch)
    r = start.rank_info()
    assert r["attn_tp_rank"] == 0 and start.is_writer(r)
