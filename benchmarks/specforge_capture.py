"""Run SpecForge's own offline hidden-state capture on token-id prompts, and time it.

SpecForge 0.2.0 (pins SGLang 0.5.14, torch 2.11) captures with `scripts/prepare_hidden_states.py`: one process
per GPU (torchrun; here TP=1, so plain `python` with the torch.distributed env set), SGLang's ModelRunner
in-process (no server, no scheduler), the prompts of a batch prefilled together in one forward
(chunked prefill off, CUDA graphs off), one `rows_{g}-{g+2000}/data_{i}.ckpt` per sample holding
{input_ids, loss_mask, aux_hidden_state [1, T, 3*hidden], hidden_state [1, T, hidden]}.

The script only reads a ShareGPT jsonl (`{"conversations": [...]}`) through a tokenizer's chat template, and
the tiny target has no tokenizer. So we give it a model-dir copy (symlinks) plus a word-level tokenizer whose
4096 words are "t0".."t4095" and whose chat template renders the user turn's text only: the text
"t12 t7 ..." tokenizes back to exactly the prompt's ids, nothing added. No assistant turn, so every loss mask
is 0 (SpecForge saves the sample anyway; its vocab mapping then warns and pads).

Timing comes from the script's own progress lines, read as they arrive: everything before the first
"Generating Hidden States" bar is model load, dataset build and vocab mapping (excluded); the first batch
carries Triton JIT and is excluded like bench_dump's warm-up request; the clock stops at
"Generation loop finished" (hidden states handed to its async writer, as our prefill clock stops at the
response) and, for `tokens_per_s_until_written`, at the last "Finalizing Writes" line (its writes done).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
import knobs

SCRIPT_ENV = "SGE3_SPECFORGE_SCRIPT"
VENDORED = Path(__file__).resolve().parent / "third_party" / "specforge_prepare_hidden_states.py"
# SpecForge's layer ids are decoder-layer outputs (id L = HF hidden_states[L+1]), so HF [1,2,3] (our dump) is
# [0,1,2]. SGLang 0.5.14's set_eagle3_layers_to_capture adds that +1 only when the list starts with 1, so it
# captures HF [0,1,2]: same count and size as ours, which is all a throughput comparison needs.
LAYER_IDS = [0, 1, 2]
BAR = re.compile(r"Generating Hidden States:.*?\|\s*(\d+)/(\d+)")


def find_script(explicit: str | None = None) -> Path:
    """prepare_hidden_states.py: `explicit`, else $SGE3_SPECFORGE_SCRIPT, else our vendored copy."""
    p = explicit or knobs.get(SCRIPT_ENV) or VENDORED
    if not Path(p).is_file():
        raise FileNotFoundError(
            f"SpecForge's prepare_hidden_states.py not found at {p}: the specforge wheel does not "
            f"ship scripts/; set {SCRIPT_ENV} to a checkout's scripts/prepare_hidden_states.py"
        )
    return Path(p)


def write_tokenizer(d: Path, vocab_size: int) -> None:
    """Word-level tokenizer: word "t{i}" <-> id i; chat template = the user turns' text, nothing else."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    template = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t0", pad_token="t0", chat_template=template
    ).save_pretrained(d)


def prepare_inputs(model_dir, prompts: list[list[int]], work: Path) -> dict:
    """target/ (model files symlinked + tokenizer), data.jsonl (ShareGPT), draft_config.json (capture layers)."""
    model_dir = Path(model_dir).resolve()
    target = work / "target"
    target.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.is_file() and not f.name.startswith("tokenizer") and f.name != "chat_template.jinja":
            (target / f.name).symlink_to(f)
    cfg = json.loads((model_dir / "config.json").read_text())
    write_tokenizer(target, cfg["vocab_size"])
    data = work / "data.jsonl"
    with open(data, "w") as fh:
        for ids in prompts:
            turn = {"role": "user", "content": " ".join(f"t{i}" for i in ids)}
            fh.write(json.dumps({"conversations": [turn]}) + "\n")
    # Only eagle_config and the vocab sizes matter to the capture; the rest makes it a valid EAGLE-3 draft config.
    draft = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": LAYER_IDS, "use_aux_hidden_state": True},
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": 2 * cfg["hidden_size"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_attention_heads"],
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "vocab_size": cfg["vocab_size"],
        "draft_vocab_size": min(1024, cfg["vocab_size"]),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    draft_cfg = work / "draft_config.json"
    draft_cfg.write_text(json.dumps(draft, indent=2))
    return {"target": target, "data": data, "draft_config": draft_cfg}


def command(
    script: Path,
    inputs: dict,
    out: Path,
    work: Path,
    max_length: int,
    batch_size: int,
    mem_fraction: float,
    attention_backend: str = "triton",
    python: str | None = None,
) -> list[str]:
    return [
        python or sys.executable,
        str(script),
        "--target-model-path",
        str(inputs["target"]),
        "--data-path",
        str(inputs["data"]),
        "--draft-model-config",
        str(inputs["draft_config"]),
        "--strategy",
        "eagle3",
        "--chat-template",
        "deepseek-v2",  # general parser, no system prompt (the tokenizer's template wins)
        "--max-length",
        str(max_length),
        "--batch-size",
        str(batch_size),
        "--tp-size",
        "1",
        "--output-path",
        str(out),
        "--cache-dir",
        str(work / "cache"),
        "--sglang-attention-backend",
        attention_backend,  # its default is flashinfer
        "--sglang-mem-fraction-static",
        str(mem_fraction),
        "--sglang-context-length",
        str(max_length),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_timed(cmd: list[str], env: dict, log: Path, timeout: float) -> dict:
    """Run cmd; return {marker: perf_counter time it was first seen}; tqdm's \\r updates count as lines."""
    t0 = time.perf_counter()
    seen: dict = {"start": t0}
    with open(log, "wb") as fh:
        fh.write(("$ " + " ".join(cmd) + "\n").encode())
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        buf = b""
        try:
            while True:
                if time.perf_counter() - t0 > timeout:
                    raise TimeoutError(f"SpecForge capture still running after {timeout} s; see {log}")
                if not select.select([proc.stdout], [], [], 1.0)[0]:
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                now = time.perf_counter()
                fh.write(chunk)
                *lines, buf = re.split(rb"[\r\n]", buf + chunk)
                for line in lines:
                    s = line.decode(errors="replace")
                    m = BAR.search(s)
                    keys = [("batch", int(m[1]), int(m[2]))] if m else []
                    keys += [k for k in ("Generation loop finished", "Waiting for all async I/O") if k in s]
                    for k in keys:
                        seen.setdefault(k, now)
                    if s.startswith("Finalizing Writes"):  # its bar's last line: every write done
                        seen["Finalizing Writes"] = now
            rc = proc.wait(60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    if rc != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"SpecForge capture exited with {rc}; see {log}:\n{tail}")
    return seen


def count_written(out: Path) -> dict:
    """Files SpecForge wrote, their bytes, and their tokens (its loader drops the last partial batch)."""
    import gzip

    import torch

    files = sorted(out.glob("rows_*/data_*.ckpt*"))
    tokens = 0
    for f in files:
        if f.suffix == ".gz":
            with gzip.open(f) as fh:
                tokens += torch.load(fh, weights_only=True)["input_ids"].numel()
        else:  # mmap: read input_ids without pulling the hidden states in
            tokens += torch.load(f, mmap=True, weights_only=True)["input_ids"].numel()
    return {"files": len(files), "bytes": sum(f.stat().st_size for f in files), "tokens_written": tokens}


def run_specforge_capture(
    model_dir,
    prompts: list[list[int]],
    out_dir,
    script_path=None,
    timeout: float = 1800,
    batch_size: int = 8,
    mem_fraction: float = 0.3,
    python: str | None = None,
    log_dir=None,
) -> dict:
    """Capture `prompts` with SpecForge into out_dir (must be empty or absent); tokens/s over batches 2..N.

    tokens, seconds, tokens_per_s: batches 2..N, clock from the end of batch 1 to the end of the loop.
    tokens_per_s_until_written: same tokens, clock to the end of its writes. Equal-length prompts make the
    per-batch token count exact (SpecForge shuffles the prompts; bench_dump's are all --len long)."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: SpecForge skips samples whose files exist")
    out.mkdir(parents=True, exist_ok=True)
    work = out.with_name(out.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # The script puts its HF dataset cache next to itself (../cache/hf_dataset): run a copy inside `work`.
    script = work / "scripts" / "prepare_hidden_states.py"
    script.parent.mkdir()
    shutil.copy(find_script(script_path), script)
    inputs = prepare_inputs(model_dir, prompts, work)
    max_length = max(map(len, prompts)) + 64  # no truncation; KV pool (batch * max_length) with headroom
    cmd = command(script, inputs, out, work, max_length, batch_size, mem_fraction, python=python)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE3_EXT")}  # SpecForge runs unpatched
    env.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        PYTHONUNBUFFERED="1",
        TQDM_MININTERVAL="0",
        SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0",
    )
    log = Path(log_dir or os.environ.get("OUT") or work) / "specforge_capture.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    seen = _run_timed(cmd, env, log, timeout)
    res = {
        "script": str(find_script(script_path)),
        "log": str(log),
        "batch_size": batch_size,
        "layer_ids": LAYER_IDS,
        **count_written(out),
    }
    res["dropped"] = len(prompts) - res["files"]  # its DataLoader has drop_last=True
    batches = {k[1]: (t, k[2]) for k, t in seen.items() if isinstance(k, tuple)}
    # no pending writes at the loop's end: no "Finalizing Writes" bar, all written by "Waiting for ..."
    loop_end = seen.get("Generation loop finished")
    done = seen.get("Finalizing Writes", seen.get("Waiting for all async I/O"))
    if not batches or loop_end is None or done is None:
        raise RuntimeError(f"SpecForge's progress lines not found in {log}; cannot time it")
    n = next(iter(batches.values()))[1]
    first = 1 if n > 1 and 1 in batches else 0  # one batch only: its warm-up stays in
    t_loop = min(t for t, _ in batches.values())  # the bar's 0/N, drawn as the loop starts
    t_first = batches[first][0] if first else t_loop
    res.update(
        n_batches=n,
        includes_warmup=first == 0,
        tokens=res["tokens_written"] * (n - first) // n,
        seconds=loop_end - t_first,
        seconds_until_written=done - t_first,
        seconds_load_and_prep=t_loop - seen["start"],
    )  # excluded: model load, tokenizing, vocab mapping
    res["tokens_per_s"] = res["tokens"] / res["seconds"]
    res["tokens_per_s_until_written"] = res["tokens"] / res["seconds_until_written"]
    return res
