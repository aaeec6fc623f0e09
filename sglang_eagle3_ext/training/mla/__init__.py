"""The MLA route of `train`: our own PyTorch loop over a twin of SGLang's MLA EAGLE-3 draft class.

train.py  the route: data, target, init-from and resume set up, the loop run, the best epoch published
loop.py   the training loop: one process, or one per rank under torchrun (DDP)
step.py   what one step computes (loss, warm-up bias)
"""
