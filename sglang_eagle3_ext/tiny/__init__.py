"""Built-in tiny models, made on first use (in the cache, or a folder given):

- `deepseek_v3` — random DeepSeek-V3 targets SGLang serves (`ensure_tiny_target`, the named `TARGETS`: the
  default, a predictable walk a draft can learn, Kimi-K2.5's width);
- `kimi_k25` — the Kimi-K2.5 wrapper around one of them, with a tiny vision tower (`ensure_tiny_kimi_target`);
- `builtin` — the model a launch preset names (`ensure_builtin`);
- `llama_draft`, `mla_draft` — random EAGLE-3 drafts in the Llama and MLA layouts (broken ones: tests/malformed_drafts.py).

`sglang-eagle3 tiny` (cli/tiny.py) writes a target and prints its folder.
"""
