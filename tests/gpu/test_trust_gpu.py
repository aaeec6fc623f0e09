"""GPU: a dumping server writes exactly what it should, no more.

- test_sample_rate_writes_exactly_the_hashed_requests[thread|process]: the tiny DeepSeek-V3 target served with
  SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE=0.25; 400 requests sent 50 at a time, so that prefill batches hold sampled
  and unsampled requests together: the manifest lists exactly the requests whose id the hash selects
  (config.sampled), written by the thread writer and by the writer process. ~1 min per writer.
- test_kimi_image_requests_counted_not_written: the tiny Kimi-K2.5 wrapper serving text and image requests with
  dumping on: every text request is dumped; every image request is answered, counted as skipped_multimodal in
  the writer's status file and never written (its prompt holds pad values, not token ids). ~1.5 min.
  The shipped tiny wrapper takes no images: its stand-in processor's tokenizer has no `<|media_pad|>` token and
  its media_placeholder_token_id (163605, Kimi-K2.5's) lies outside its 4096-token vocab. The test serves a copy
  whose tokenizer holds `<|media_pad|>` as the last vocab id and whose config names that id; SGLang's Kimi-K2.5
  processor then expands it per image (GPU path: 4 tokens for a 56x56 image) and its vision tower runs.
Figures: printed, and $OUT/trust_sample_rate_<writer>.json, $OUT/trust_kimi_images.json.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from gpu_helpers import (
    LOG_DIR,
    activation_env,
    eager_prefill_args,
    free_port,
    http_json,
    server_args,
    sglang_server,
    wait_for,
)
from test_dump_gpu import _activation_env, dump_args

pytestmark = pytest.mark.gpu
RATE = 0.25
N_REQUESTS = 400
BURST = 50  # requests in flight at once: prefill batches mix sampled and unsampled requests
PROMPT = 32
KIMI_ARGS = [
    "--trust-remote-code",  # the wrapper's processor is remote code, as Kimi-K2.5's own
    "--mm-attention-backend",
    "triton_attn",
]  # the vision tower off FA3 (SGLang's Hopper default)
MEDIA_PAD = "<|media_pad|>"


def _payload(rid: str, ids, **extra) -> dict:
    return {"rid": rid, "input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0}, **extra}


def _status(dump: Path) -> dict:
    try:
        return json.loads((dump / "status" / "dp0.json").read_text())
    except (OSError, ValueError):
        return {}


def _settled(dump: Path, counted: int):
    """The writer's status file (refreshed every few seconds) has seen `counted` requests (written + skipped
    multimodal) and holds nothing in flight."""
    s = _status(dump).get("stats", {})
    done = s.get("written", 0) + s.get("skipped_multimodal", 0)
    return s if done >= counted and s.get("pending_bytes") == 0 and s.get("partials") == 0 else None


def _send(base: str, payloads: list[dict]) -> list[dict]:
    """Every payload, BURST at a time; each answer checked (an image request must be served, not refused)."""
    out = []
    for i in range(0, len(payloads), BURST):
        with ThreadPoolExecutor(BURST) as ex:
            out += list(ex.map(lambda p: http_json(base + "/generate", p, timeout=300), payloads[i : i + BURST]))
    for p, r in zip(payloads, out):
        assert isinstance(r, dict) and r.get("output_ids"), (p["rid"], r)
    return out


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_sample_rate_writes_exactly_the_hashed_requests(writer, tiny_target, tmp_path):
    from sglang_eagle3_ext.dump.config import sampled
    from sglang_eagle3_ext.dump.manifest import read_manifest

    dump = tmp_path / "dump"
    dump.mkdir()
    env = activation_env(
        tmp_path,
        SGLANG_EAGLE3_EXT_DUMP_DIR=str(dump),
        SGLANG_EAGLE3_EXT_DUMP_SAMPLE_RATE=str(RATE),
        SGLANG_EAGLE3_EXT_DUMP_WRITER=writer,
    )
    args = [
        "--model-path",
        str(tiny_target),
        *server_args("triton"),
        "--disable-radix-cache",
        *eager_prefill_args(tiny_target),
    ]
    g = torch.Generator().manual_seed(0)
    rids = [f"s{i:04d}" for i in range(N_REQUESTS)]
    payloads = [_payload(r, torch.randint(10, 4000, (PROMPT,), generator=g).tolist()) for r in rids]
    want = {r for r in rids if sampled(r, RATE)}
    with sglang_server(
        args, name=f"trust_rate_{writer}", port=free_port(), env=env, launcher="sglang.launch_server"
    ) as (base, log, _):
        t0 = time.monotonic()
        _send(base, payloads)
        stats = wait_for(lambda: _settled(dump, len(want)), 120, "the writer to write the sampled requests")
        time.sleep(6)  # one more status refresh: a late extra sample would show now
        stats = _status(dump)["stats"]
        text = Path(log).read_text()
        assert "DISABLED" not in text and "STOPPED" not in text
        if writer == "process":
            assert "writing from a separate process" in text
    written = set(read_manifest(dump))
    fig = {
        "writer": writer,
        "rate": RATE,
        "sent": len(rids),
        "selected_by_hash": len(want),
        "written": len(written),
        "extra": len(written - want),
        "missing": len(want - written),
        "batches_with_a_sampled_request": stats.get("batches"),
        "seconds": round(time.monotonic() - t0, 1),
    }
    (LOG_DIR / f"trust_sample_rate_{writer}.json").write_text(json.dumps(fig, indent=2))
    print(
        f"\nsample rate {RATE} [{writer} writer]: {fig['written']} written of {fig['sent']} sent, "
        f"{fig['selected_by_hash']} selected by the hash; extra {fig['extra']}, missing {fig['missing']}; "
        f"{fig['batches_with_a_sampled_request']} batches copied"
    )
    assert written == want, fig
    assert stats.get("written") == len(want), (fig, stats)


def _image_capable_kimi(src: Path, dst: Path) -> tuple[Path, int]:
    """A copy of the tiny Kimi-K2.5 wrapper that takes images: `<|media_pad|>` is the tokenizer's last id (a
    special token, so a run of them tokenizes as a run) and the config's media_placeholder_token_id. Weights
    are linked, not copied. Returns (dir, the placeholder id)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name == "text" or f.name.startswith((".", "tokenizer")) or f.name == "special_tokens_map.json":
            continue
        if f.suffix == ".safetensors":
            os.symlink(f.resolve(), dst / f.name)
        elif f.is_file():
            shutil.copy2(f, dst / f.name)
    cfg = json.loads((src / "config.json").read_text())
    vocab = int(cfg["text_config"]["vocab_size"])
    pad_id = vocab - 1
    cfg["media_placeholder_token_id"] = pad_id
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    words = {f"t{i}": i for i in range(pad_id)}
    words[MEDIA_PAD] = pad_id
    tok = Tokenizer(models.WordLevel(words, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(MEDIA_PAD, special=True, normalized=False)])
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t0", additional_special_tokens=[MEDIA_PAD]
    ).save_pretrained(str(dst))
    return dst, pad_id


def _png_data_url(i: int, size: int = 56) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), ((37 * i) % 256, (91 * i) % 256, (53 * i) % 256)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_kimi_image_requests_counted_not_written(tmp_path):
    from sglang_eagle3_ext.dump.manifest import read_manifest
    from sglang_eagle3_ext.tiny.kimi_k25 import ensure_tiny_kimi_target

    kimi, pad_id = _image_capable_kimi(
        ensure_tiny_kimi_target(tmp_path / "kimi", route_bias=1.0), tmp_path / "kimi_img"
    )
    dump = tmp_path / "dump"
    dump.mkdir()
    g = torch.Generator().manual_seed(1)
    text_rids = [f"text-{i:02d}" for i in range(16)]
    image_rids = [f"image-{i:02d}" for i in range(16)]
    payloads = []
    for t, im in zip(text_rids, image_rids):  # interleaved: batches hold both kinds
        payloads.append(_payload(t, torch.randint(10, 4000, (PROMPT,), generator=g).tolist()))
        head, tail = (torch.randint(10, 4000, (12,), generator=g).tolist() for _ in range(2))
        payloads.append(_payload(im, head + [pad_id] + tail, image_data=[_png_data_url(len(payloads))]))
    env = _activation_env(tmp_path, dump)
    with sglang_server(
        [*dump_args(kimi, "triton"), *KIMI_ARGS],
        name="trust_kimi_images",
        port=free_port(),
        env=env,
        launcher="sglang.launch_server",
    ) as (base, log, _):
        answers = _send(base, payloads)
        wait_for(lambda: _settled(dump, len(payloads)), 120, "the writer to see every request")
        text = Path(log).read_text()
        assert "DISABLED" not in text and "STOPPED" not in text
    prompt_lens = {p["rid"]: a.get("meta_info", {}).get("prompt_tokens") for p, a in zip(payloads, answers)}
    stats = _status(dump)["stats"]
    written = set(read_manifest(dump))
    fig = {
        "text_sent": len(text_rids),
        "image_sent": len(image_rids),
        "written": len(written),
        "written_text": len(written & set(text_rids)),
        "written_image": len(written & set(image_rids)),
        "skipped_multimodal": stats.get("skipped_multimodal"),
        "refused_token_id": stats.get("refused_token_id"),
        "image_prompt_tokens": prompt_lens[image_rids[0]],
        "sent_image_prompt_ids": 25,
    }
    (LOG_DIR / "trust_kimi_images.json").write_text(json.dumps(fig, indent=2))
    print(
        f"\nKimi wrapper, text + image requests with dumping on: {fig['written_text']}/{fig['text_sent']} text "
        f"requests written, {fig['written_image']}/{fig['image_sent']} image requests written, skipped_multimodal "
        f"{fig['skipped_multimodal']}, refused_token_id {fig['refused_token_id']} (an image prompt of 25 ids "
        f"became {fig['image_prompt_tokens']} tokens: the image expanded)"
    )
    assert written == set(text_rids), fig
    assert fig["skipped_multimodal"] == len(image_rids) and fig["refused_token_id"] == 0, fig
