"""The dump's half inside SGLang's processes, in the order a sample travels (the files it writes: ../../dump/).
    start.py           after the target's __init__: capture switched on, metadata, this process's writer
    capture.py         DumpTarget: LogitsProcessor hook, checks each pure-EXTEND batch
    copy.py            device->host copies (side stream, one CUDA event) into the staging ring
    staging.py         the pinned staging ring (shared memory for the writer process)
    assemble.py        chunked prefills stitched per request (waits for the copy event)
    writer/            thread.py: io threads: finite check, one sample file each (or process.py + child.py: a child
                       process, talking in messages.py); hygiene.py: unfit samples, a killed writer's tmp files;
                       backpressure.py: ForwardThreadApi (what the capture calls on either writer), the host budget
  beside the path:
    ranks.py           which rank writes;  prefill_graphs.py: start-up refusal where prefill runs in a graph
    serving_mode.py, verify_capture.py, serving_assembler.py   dump while serving EAGLE-3 (responses too)

Nothing heavy is imported here.
"""
