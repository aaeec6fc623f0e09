"""Prefill hidden-state dumps from SGLang's own DeepSeek-V2/V3 (and Kimi-K2.5) forward pass.

Server side (env, see config.py): SGLANG_EAGLE3_EXT=1 SGLANG_EAGLE3_EXT_DUMP_DIR=/data/dump
    python -m sglang.launch_server ... --disable-radix-cache
Client:   python -m sglang_eagle3_ext.dump run --url http://host:30000 --data prompts.jsonl --dump-dir /data/dump
Export:   python -m sglang_eagle3_ext.dump export --dump-dir /data/dump --to speculators --out /data/spec
Nothing heavy is imported here.
"""
