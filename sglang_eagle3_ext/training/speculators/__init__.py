"""The Llama route of `train`: speculators' own trainer run in this process, with our batches, step loop,
checkpoints and progress lines swapped in for the run.

    train.py         the route: data, target, init-from and resume set up, the run, the best epoch published
    run.py           speculators' `train` main on this rank: its argv, its output after each epoch, the summary
    draft_config.py  the draft's decoder config (a classic Llama EAGLE-3 head SGLang serves)
    patches.py       the changes to speculators made for the duration of one run
    trainer.py       the `Trainer` subclass those changes swap in
    progress.py      our step and epoch lines, read from speculators' metric records
"""
