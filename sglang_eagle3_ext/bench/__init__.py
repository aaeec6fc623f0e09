"""The acceptance benchmark's library: `run.benchmark(run.BenchOptions(url=...))` drives a server with
speculative decoding (and a baseline) and returns per-level figures and a verdict.

- `options` — `BenchOptions`: one run's options, each flag declared once;
- `run` — the benchmark (`benchmark`), the servers' logs, the request lengths;
- `stats` — what one server did at one level (`RunStats`: accept length, per-position acceptance, tokens/s);
- `prompts` — prompt sets: the user's JSONL / ShareGPT / MT-bench files, or built-in token ids;
- `steps` — one iteration's and one admission's cost, read from a SGLang server's log;
- `verdict` — OK / WARNING / FAIL and the advice when speculation is slower;
- `report` — the result as the text table and as an HTML report with plots.

`sglang-eagle3 bench` (cli/bench.py) is its command line.
"""
