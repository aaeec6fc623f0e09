"""The DFlash route of draft training: a block-diffusion draft (SGLang's DFlashDraftModel, Qwen3 decoder layers
over fc(K target states), the target's embedding and head) trained by speculators' own DFlash model and trainer
from the same exported hidden states as the Llama route (`config`: what it refuses and builds, shared with
`train --dry-run`; `train`: the run)."""
