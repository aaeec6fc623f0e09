"""`sglang-eagle3 tune`: the fastest speculative settings for a user's own draft and traffic.

    accept.py      accept length for every steps count 1..8, offline, from one simulation of the user's dump
    backends.py    which attention backends to time: the release's choices, the GPU, the kernels installed
    timings.py     the timing pass's file (what was measured per backend), written and read back checked
    costmodel.py   the iteration's parts fitted by least squares; tokens/s predicted per (backend, steps, c)
    servers.py     one SGLang server started through our launcher, timed, stopped; what the run spends
    timing.py      the timing pass (target-only and EAGLE-3 servers, short outputs, every batch size)
    search.py      candidates ranked per concurrency band; the best measured with `bench` on the user's prompts
    adaptive.py    a `--speculative-adaptive-config` fitted to the acceptance and the measured costs
    preset.py      the result as a launch preset (YAML) with the figures and the command in its header
    projection.py  the speedup projected to 61 layers at TP 8 from the measured parts
    plot.py        tokens/s vs concurrency (matplotlib, else a hand-written SVG)
    outputs.py     from the fitted models and the best per band: the adaptive config, presets, projection, plot
    options.py     TuneOptions: what tune takes, each flag declared once
    run.py         TuneOptions -> the report (the dry-run plan, the budget, every step in order); render()

Nothing heavy is imported here.
"""
