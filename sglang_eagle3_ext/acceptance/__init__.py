"""The served accept length of an EAGLE-3 or DFlash draft, predicted offline (`sglang-eagle3 eval`).

    options.py     EvalOptions: what eval takes, each flag declared once
    evaluate.py    EvalOptions -> the report (held-out split, draft, simulation, tallies, --url); render()
    data.py        the samples: a dump dir or a training export, read with the dump's / training's readers;
                   the held-out split `train` keeps out
    drafts.py      the draft as a server runs it (check's verdict, the package's safetensors reader, the
                   worker's embed / lm_head / d2t swaps) as the layout's SGLang-equal module (draft/arch/<layout>/net.py)
    simulate.py    one verify round of the EAGLE-3 worker (topk 1) for every anchor at once
    block.py       one verify round of the DFLASH worker (a block of B-1 drafts) for every anchor at once
    stats.py       per-position acceptance and accept length over every anchor and over a greedy server's rounds
    served.py      --url: the same prompts on a running server, read as `bench` reads replies
    select.py      `train --select-by predicted-accept`'s per-epoch score (training/selection.py keeps the best)

Nothing heavy is imported here.
"""
