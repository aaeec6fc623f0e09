"""The launcher on real GPUs (run by tests/gpu/run.sh; SGLang 0.5.16).

- preflight bandwidth with NCCL's default transport and with P2P forced off (SHM), printed;
- `--preset tiny --tp N --nccl-profile pcie --preflight` (N = every GPU up to 8, or $SGE3_TP): preflight
  passes, the tiny model is made on first use, every TP rank logs its NCCL channels (proof our env reached
  the workers), /generate answers;
- `--preset tiny-dump` serves on one GPU;
- the README's first-run command exactly as written, `sglang-eagle3 launch --preset tiny-dump`, in a fresh folder:
  SGLang says it is ready, port 30000 answers, the prefill lands in ./dumps;
- `--preset tiny --dump-dir DIR`: the launcher makes DIR and the server dumps there.
Variables already set in the environment (e.g. NCCL_NVLS_ENABLE=0 where multicast is off) are inherited: the
launcher never overrides a variable the user set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
from gpu_helpers import decode_graphs_captured, generate, multi_gpu_tp, sglang_server, wait_for
from gpu_helpers import free_port as _port

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture
def tp():
    n = multi_gpu_tp()
    if not n:
        pytest.skip(f"needs 2 GPUs, found {_gpus()}")
    return n


def test_preflight_busbw_default_and_forced_shm(tp, tmp_path):
    from sglang_eagle3_ext.launch import preflight

    for label, extra in (("default", {}), ("forced SHM (NCCL_P2P_DISABLE=1)", {"NCCL_P2P_DISABLE": "1"})):
        env = {**os.environ, "NCCL_DEBUG": "WARN", **extra}
        res = preflight.run_preflight(tp, env=env, timeout=180, retry=False, workdir=str(tmp_path / str(len(extra))))
        print(f"\n[{label}]\n{res.report()}")
        assert res.ok, res.report()
        big = max(res.attempts[0].results, key=lambda r: r.nbytes)
        assert big.busbw_gbs > 1.0  # any real transport does better than 1 GB/s at 256 MiB


def test_tiny_tp_pcie_profile_with_preflight_serves(tp, tmp_path):
    cache = tmp_path / "cache"
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV", "SGLANG_EAGLE3_EXT_CACHE": str(cache)}
    # --loopback-only: NCCL_IB_DISABLE=1 then comes from the launcher, so NCCL's log proves our env reached the ranks
    args = ["--preset", "tiny", "--tp", str(tp), "--nccl-profile", "pcie", "--preflight", "--loopback-only"]
    with sglang_server(args, name=f"launch_tiny_tp{tp}_pcie", port=_port(), env=env, timeout=900) as (base, log, _):
        out = generate(base, [1, 2, 3, 4, 5, 6, 7, 8], max_new_tokens=8)
        assert len(out["output_ids"]) == 8
        text = log.read_text(errors="replace")
    assert (cache / "tiny-deepseek-v3" / ".complete").exists()  # made on first use
    assert f"preflight: {tp} ranks, backend nccl: PASSED" in text
    # the pcie profile's TP-size decision reached the command
    assert ("--enable-p2p-check" if tp == 2 else "--disable-custom-all-reduce") in text
    channels = re.findall(r"NCCL INFO Channel \d+/\d+ : (\d+)\[\d+\] -> \d+\[\d+\] via (P2P|SHM)", text)
    ranks = {r for r, _ in channels}
    print(
        f"\nNCCL channels per source rank: { {r: sorted({t for rr, t in channels if rr == r}) for r in sorted(ranks)} }"
    )
    assert {str(r) for r in range(tp)} <= ranks, "NCCL INFO channel lines from every TP rank expected in the log"
    assert re.search(r"NCCL_IB_DISABLE set by environment to 1", text), "our NCCL_IB_DISABLE=1 not seen by NCCL"


def test_readme_tiny_dump_serves_on_one_gpu(attn_backend, tmp_path):
    """The README's run command as shipped (CUDA graphs on, prefill eager for the dump), once per attention
    backend (the command line overrides the preset's triton)."""
    if _gpus() < 1:
        pytest.skip("needs a GPU")
    # the user's dump dir wins over the preset's ./dumps (and keeps the checkout clean)
    env = {"SGLANG_EAGLE3_EXT_CACHE": str(tmp_path / "cache"), "SGLANG_EAGLE3_EXT_DUMP_DIR": str(tmp_path / "dumps")}
    with sglang_server(
        ["--preset", "tiny-dump", "--attention-backend", attn_backend, "--cuda-graph-max-bs", "16"],
        name=f"launch_tiny_dump_{attn_backend}",
        port=_port(),
        env=env,
        timeout=900,
    ) as (base, log, _):
        out = generate(base, list(range(1, 33)), max_new_tokens=4)
        assert len(out["output_ids"]) == 4
        text = log.read_text(errors="replace")
    assert re.search(r"SGLANG_EAGLE3_EXT_DUMP_DIR\s+\S+\s+user", text) and "--disable-radix-cache" in text
    assert "SGLANG_EAGLE3_EXT_DUMP_LAYERS=1,2,3" in text
    assert "--disable-cuda-graph " not in text and "--disable-prefill-cuda-graph" in text  # decode graphs on
    assert decode_graphs_captured(text), "no decode CUDA graph captured"


README_PORT = 30000  # "It serves on port 30000" (README, First run)
READY = "The server is fired up and ready to roll!"  # SGLang's line once its warm-up request is answered


def _console_script(tmp_path) -> str:
    """`sglang-eagle3` as pip installs it; where the package is not pip-installed (a checkout on PYTHONPATH), the
    same entry point written as pip writes it (`sglang_eagle3_ext.cli:main`, pyproject's [project.scripts])."""
    exe = shutil.which("sglang-eagle3")
    if exe:
        return exe
    script = tmp_path / "bin" / "sglang-eagle3"
    script.parent.mkdir(parents=True)
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom sglang_eagle3_ext.cli import main\n"
        f"if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    script.chmod(0o755)
    return str(script)


def test_readme_first_run_command_serves(tmp_path):
    """`sglang-eagle3 launch --preset tiny-dump`, nothing added, run in a fresh folder as the README's First run
    says: the tiny target is made on first use, SGLang logs that it is ready, one request on port 30000 is
    answered, and its prefill is dumped into ./dumps of that folder. Figures: $OUT/readme_first_run.json."""
    if _gpus() < 1:
        pytest.skip("needs a GPU")
    from gpu_helpers import LOG_DIR

    from sglang_eagle3_ext.dump.manifest import read_manifest

    with socket.socket() as sock:  # the README's port must be free for the command as written
        sock.bind(("127.0.0.1", README_PORT))
    cwd = tmp_path / "first_run"
    cwd.mkdir()
    cmd = [_console_script(tmp_path), "launch", "--preset", "tiny-dump"]
    fig: dict = {"command": "sglang-eagle3 launch --preset tiny-dump", "ran": cmd}
    t0 = time.time()
    with sglang_server([], name="readme_first_run", port=README_PORT, command=cmd, cwd=cwd, timeout=900) as (
        base,
        log,
        _,
    ):
        fig["healthy_s"] = round(time.time() - t0, 1)
        wait_for(lambda: READY in log.read_text(errors="replace"), 300, "SGLang's ready line", poll=1.0)
        fig["ready_s"] = round(time.time() - t0, 1)
        out = generate(base, list(range(1, 33)), max_new_tokens=8)
        fig["output_ids"] = out.get("output_ids")
        dumps = cwd / "dumps"
        fig["dumped"] = wait_for(
            lambda: (dumps / "manifests").is_dir() and len(read_manifest(dumps)),
            120,
            "the request's prefill in ./dumps",
            poll=1.0,
        )
        text = log.read_text(errors="replace")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "readme_first_run.json").write_text(json.dumps(fig, indent=2))
    print(
        f"first run [sglang-eagle3 launch --preset tiny-dump]: healthy after {fig['healthy_s']} s, ready after "
        f"{fig['ready_s']} s, 8-token answer {fig['output_ids']}, dumped {fig['dumped']}",
        flush=True,
    )
    assert len(out["output_ids"]) == 8
    assert decode_graphs_captured(text), "no decode CUDA graph captured"


def test_dump_dir_flag_makes_the_folder_and_the_server_dumps_there(tmp_path):
    """`launch --preset tiny --dump-dir DIR`: DIR did not exist; the launcher makes it and hands it to every SGLang
    process as SGLANG_EAGLE3_EXT_DUMP_DIR; the dump client finds the server dumping there and every prompt lands
    in its manifest. tiny is not a dump preset: what a dump needs comes on the command line (radix cache off,
    prefill graphs off; decode graphs stay on)."""
    if _gpus() < 1:
        pytest.skip("needs a GPU")
    from sglang_eagle3_ext.dump.manifest import read_manifest

    dump = tmp_path / "made" / "by" / "the" / "launcher"
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"s{i}", "input_ids": list(range(10 + i, 74 + i))}) + "\n" for i in range(4))
    )
    env = {"SGLANG_EAGLE3_EXT_CACHE": str(tmp_path / "cache")}
    args = [
        "--preset",
        "tiny",
        "--dump-dir",
        str(dump),
        "--disable-radix-cache",
        "--disable-prefill-cuda-graph",
        "--cuda-graph-max-bs",
        "16",
    ]
    with sglang_server(args, name="launch_tiny_dump_dir", port=_port(), env=env, timeout=900) as (base, log, _):
        client = subprocess.run(
            [
                sys.executable,
                "-m",
                "sglang_eagle3_ext.dump",
                "run",
                "--url",
                base,
                "--data",
                str(data),
                "--dump-dir",
                str(dump),
                "--concurrency",
                "4",
                "--quiet",
                "--wait-s",
                "120",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert client.returncode == 0, f"dump client: {client.stdout[-2000:]}{client.stderr[-2000:]}; server log {log}"
        text = log.read_text(errors="replace")
    assert re.search(rf"SGLANG_EAGLE3_EXT_DUMP_DIR\s+{re.escape(str(dump))}\s+set\s+--dump-dir", text)
    assert f"SGLANG_EAGLE3_EXT_DUMP_DIR={dump}" in text
    assert sorted(read_manifest(dump)) == [f"s{i}" for i in range(4)]
    assert decode_graphs_captured(text), "no decode CUDA graph captured"
