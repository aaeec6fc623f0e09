"""Prefill hidden-state dumps from SGLang's own DeepSeek-V2/V3 (and Kimi-K2.5) forward pass.

Server side (env, see config.py): SGLANG_EAGLE3_EXT=1 SGLANG_EAGLE3_EXT_DUMP_DIR=/data/dump
    python -m sglang.launch_server ... --disable-radix-cache
Client:   python -m sglang_eagle3_ext.dump run --url http://host:30000 --data prompts.jsonl --dump-dir /data/dump
Export:   python -m sglang_eagle3_ext.dump export --dump-dir /data/dump --to speculators --out /data/spec
What runs inside the server (start, capture, copy, assemble, the writer) is in_server/dump/, with its own map.
Here, what both sides share and the tools beside the server (never importing in_server/):
    config.py          the dump's settings;  sample_file.py: the safetensors sample format;  encoding.py: fp8
    manifest.py        the list of complete samples;  status.py: counters per writer
    export.py          manifest -> a training tool's layout (`dump export`; exporters/: one module per format);
                       loss_mask.py: the default mask
    driver.py          what `sglang-eagle3 dump run|status|export` does (over server/http_client.py; client_files.py:
                       the files it reads); run_options.py: RunOptions, `dump run`'s flags declared once

Nothing heavy is imported here.
"""
