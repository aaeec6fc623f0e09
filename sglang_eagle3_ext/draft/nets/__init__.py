"""The EAGLE-3 drafts SGLang serves, as plain PyTorch modules (CPU included, no SGLang distributed state): one set,
built by training and by eval alike. Each layout names its module in draft/arch (`NET`).

    common.py   what every draft shares with SGLang: RMSNorm, the SiLU MLP, the aux-state input (fc_norm + fc)
    llama.py    SGLang's LlamaForCausalLMEagle3 (tests/sglang_cpu/test_acceptance_equiv.py holds them equal)
    mla.py      SGLang's Eagle3DeepseekV2ForCausalLM, trainable (tests/sglang_cpu/test_mla_draft_equiv.py)

Nothing is imported here: each module imports torch.
"""
