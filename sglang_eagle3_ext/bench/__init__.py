"""The acceptance benchmark's library: prompts, speculative steps, the report and its verdict.

`sglang-eagle3 bench` (cli/bench.py) drives a server with these.
"""
