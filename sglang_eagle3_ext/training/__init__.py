"""Draft training that does not go through speculators: the MLA EAGLE-3 layout SGLang serves for Kimi-K2.x."""
