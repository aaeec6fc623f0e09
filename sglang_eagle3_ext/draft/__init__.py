"""EAGLE-3 draft checkpoints: one set of rules shared by the loader, `check` and `convert`.

    keys.py            key names per SGLang release (renames, what each release can hold)
    safetensors_io.py  header-only reading of .safetensors files (no SGLang, no torch needed)
    config_schema.py   the types a draft config.json must hold (outside input), checked before any rule reads it
    rules.py           config, shape and value rules -> Problems (one rule each, e.g. a trained lm_head SGLang discards)
    target.py          the target as the rules see it: its config, and its lm_head when its weights are at hand
    mla.py             the MLA draft class Eagle3DeepseekV2ForCausalLM (Kimi-K2.5's drafts): its own rules
    hub.py             hub-id drafts: the local Hugging Face cache only, never the network
    errors.py          Problem codes and the exceptions people see
    loader.py          strict accounting around SGLang's own load_weights
    guard.py           fc input-width check at forward time
    progress.py        a progress line for long reads of weights (value scans, convert)
    capture_layers.py  which target hidden states the draft was trained on
    tiny_draft.py, tiny_mla_draft.py   tiny drafts (Llama via speculators, MLA) and malformed variants for tests
    (the CLIs are ../check.py and ../convert.py)

Nothing heavy is imported here.
"""
