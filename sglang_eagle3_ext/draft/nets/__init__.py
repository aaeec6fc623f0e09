"""What the drafts' networks share (each layout's own is draft/arch/<layout>/net.py: llama's, held equal to SGLang's
LlamaEagle3 by tests/sglang_cpu/test_acceptance_equiv.py; mla's by test_mla_draft_equiv.py; dflash's, one block per
verify round, by test_dflash_equiv.py and, against speculators' DFlashDraftModel, tests/unit/draft/test_dflash_net.py):
plain PyTorch modules (CPU included, no SGLang distributed state), built by training and by eval alike.

    common.py   what the drafts share with SGLang: RMSNorm, the SiLU MLP, the aux-state input (fc_norm + fc), RoPE

A network whose `drafts_block` is true proposes all its tokens of a round from one block (eval verifies the block,
acceptance/block.py); any other drafts a chain, one forward per step (acceptance/simulate.py).

Nothing is imported here: common.py imports torch.
"""
