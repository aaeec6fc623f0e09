"""What the dump writer keeps out of the dump dir: samples that are no training samples (NaN/Inf in their
states, token ids outside the target's vocab) and the temporary files a killed run of the writer left behind."""

from __future__ import annotations

import contextlib
import logging
import os

from ...._log import log_once
from ....dump.sample_file import T_IDS
from ..assemble import Sample


def remove_own_tmp(samples_dir: str, writer_name: str) -> None:
    """Temporary files a killed run of writer `writer_name` left under `samples_dir` (never listed in a
    manifest); other writers' files stay."""
    tag = f".tmp{writer_name}."
    # os.scandir over the shard folders: a restart into a dump of millions of samples lists names only
    # (pathlib's rglob builds a Path per file: the slow part of a start-up)
    stack = [samples_dir]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") and tag in e.name:
                with contextlib.suppress(OSError):
                    os.unlink(e.path)
            elif e.is_dir(follow_symlinks=False):
                stack.append(e.path)


def unfit(s: Sample, tensors: dict, vocab, writer_name: str) -> str | None:
    """The counter to bump when the sample is no training sample (said once per kind), else None: NaN/Inf in its
    states, or a token id outside the target's vocab (a multimodal pad value, MM_PAD_SHIFT_VALUE + a hash, that
    the capture missed)."""
    finite = s.finite()
    if finite is None:
        finite = all(bool(t.isfinite().all()) for k, t in tensors.items() if k != T_IDS)
    if not finite:
        log_once(
            "dump.nonfinite",
            "dump: skipping request %s: NaN/Inf in its hidden states (counted in status/%s.json)",
            s.rid,
            writer_name,
            level=logging.WARNING,
        )
        return "nonfinite"
    ids = tensors[T_IDS]
    if vocab and ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < vocab:
        log_once(
            "dump.token_id",
            "dump: skipping request %s: a token id outside the target's vocab [0, %d) "
            "(a multimodal pad value?); counted in status/%s.json",
            s.rid,
            vocab,
            writer_name,
            level=logging.WARNING,
        )
        return "refused_token_id"
    return None
