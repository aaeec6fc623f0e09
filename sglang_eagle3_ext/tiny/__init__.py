"""Built-in tiny models made on first use: a random DeepSeek-V3 target (`deepseek_v3`), the Kimi-K2.5 wrapper
around it (`kimi_k25`), and random EAGLE-3 drafts in the Llama (`llama_draft`) and MLA (`mla_draft`) layouts."""
