"""The drafts SGLang serves (EAGLE-3, DFlash), as plain PyTorch modules (CPU included, no SGLang distributed state):
one set, built by training and by eval alike. Each layout names its module in draft/arch (`NET`).

    common.py   what the drafts share with SGLang: RMSNorm, the SiLU MLP, the aux-state input (fc_norm + fc), RoPE
    llama.py    SGLang's LlamaForCausalLMEagle3 (tests/sglang_cpu/test_acceptance_equiv.py holds them equal)
    mla.py      SGLang's Eagle3DeepseekV2ForCausalLM, trainable (tests/sglang_cpu/test_mla_draft_equiv.py)
    dflash.py   SGLang's DFlashDraftModel as its DFLASH worker runs it, one block per verify round
                (tests/sglang_cpu/test_dflash_equiv.py; tests/unit/test_dflash_net.py: speculators' DFlashDraftModel)

A NET whose `drafts_block` is true proposes all its tokens of a round from one block (eval verifies the block,
acceptance/block.py); any other drafts a chain, one forward per step (acceptance/simulate.py).

Nothing is imported here: each module imports torch.
"""
