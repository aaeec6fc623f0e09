"""Prefill hidden-state dumps from SGLang's own DeepSeek-V2/V3 (and Kimi-K2.5) forward pass.

Server side (env, see config.py): SGLANG_EAGLE3_EXT=1 SGLANG_EAGLE3_EXT_DUMP_DIR=/data/dump
    python -m sglang.launch_server ... --disable-radix-cache
Client:   python -m sglang_eagle3_ext.dump run --url http://host:30000 --data prompts.jsonl --dump-dir /data/dump
Export:   python -m sglang_eagle3_ext.dump export --dump-dir /data/dump --to speculators --out /data/spec
Modules, in the order a sample travels (server side first):
    start.py           after the target's __init__: capture switched on, metadata, this process's writer
    capture.py         DumpTarget: LogitsProcessor hook, checks each pure-EXTEND batch
    copy.py            device->host copies (side stream, one CUDA event) into the staging ring
    staging.py         the pinned staging ring (shared memory for the writer process)
    assemble.py        chunked prefills stitched per request (waits for the copy event)
    writer.py          io threads: finite check, one sample file each  (or writer_process.py + writer_child.py,
                       talking in writer_messages.py); writer_hygiene.py: unfit samples, a killed writer's tmp files
    manifest.py        the list of complete samples;  status.py: counters per writer
    export.py          manifest -> a training tool's layout (`dump export`; exporters/: one module per format);
                       loss_mask.py: the default mask
  beside the path:
    backpressure.py    ForwardThreadApi (what the capture calls on either writer) and the host-memory budget
    sample_file.py     the safetensors sample format;  encoding.py: fp8;  config.py: the dump's settings
    ranks.py           which rank writes;  prefill_graphs.py: start-up refusal where prefill runs in a graph
    serving_mode.py, verify_capture.py, serving_assembler.py   dump while serving EAGLE-3 (responses too)
    driver.py          what `sglang-eagle3 dump run|status|export` does (over server/http_client.py; client_files.py:
                       the files it reads); run_options.py: RunOptions, `dump run`'s flags declared once

Nothing heavy is imported here.
"""
