"""EAGLE-3 draft checkpoints: one set of rules shared by the loader, `check` and `convert`.

    arch/              draft layouts, one folder each (llama/, mla/, dflash/: the declaration, its network), and
                       the registry that checks each when it registers: a layout's config fields, shapes, release
                       key names, fused parameters, source formats, SGLang class and training route; everything
                       below asks the draft's layout, never names a layout
    keys.py            key names per SGLang release (renames, what each release can hold)
    safetensors_io.py  header-only reading of .safetensors files (no SGLang, no torch needed)
    config_schema.py   the types a draft config.json must hold (outside input), checked before any rule reads it
    config_rules.py    a config's rules: the DraftSpec it implies and its config-level Problems
    rules.py           shape and value rules -> Problems (one rule each, e.g. a trained lm_head SGLang discards)
    target.py          the target as the rules see it: its config, and its lm_head when its weights are at hand
    check.py           the verdict on a draft for a release (`check`, the launcher's pre-check): check_draft, describe_draft
    convert.py         any accepted format -> the draft SGLang loads as trained (`convert`); its files: convert_io.py
    hub.py             hub-id drafts: the local Hugging Face cache only, never the network
    errors.py          Problem codes and the exceptions people see
    swap/              a new draft into a running server: the client (`sglang-eagle3 swap`), the rules it shares
                       with the server's handler
    progress.py        a progress line for long reads of weights (value scans, convert)
    layers.py          the default aux layers and the release's +1 rule (HF index vs SGLang's layer ids)
    (what runs inside SGLang, the loader, the forward guard, the capture layers and the swap's handler:
    ../in_server/draft/;
    the command lines are ../cli/check.py and ../cli/convert.py; tiny drafts for tests: ../tiny/)

Nothing heavy is imported here.
"""
